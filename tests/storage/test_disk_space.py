"""storage.disk_space: free space of a local checkpoint's (or an export's) filesystem, checked before a write."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from pbg_core.ports import CheckpointMetadata
from pbg_core.training.optimizers import RowAdagrad, state_to_bytes
from storage.checkpoints import CheckpointStore
from storage.disk_space import (
    NoSpaceForCheckpoint,
    NoSpaceForOutput,
    attrs_bytes,
    check_disk_space,
    check_free_space,
    free_bytes,
    hdf5_file_bytes,
    is_out_of_space,
    nearest_existing_dir,
    no_space_while_writing,
    version_files_bytes,
)
from storage.errors import OutputNotWritable


def test_nearest_existing_dir(tmp_path: Path) -> None:
    assert nearest_existing_dir(str(tmp_path / "a" / "b" / "ckpt")) == str(tmp_path)
    (tmp_path / "a").mkdir()
    assert nearest_existing_dir(str(tmp_path / "a" / "b")) == str(tmp_path / "a")
    assert nearest_existing_dir(str(tmp_path)) == str(tmp_path)


def test_a_small_disk_refuses_more_than_it_has(small_disk: Callable[[int], Path]) -> None:
    disk = small_disk(1 << 20)
    assert 0 < free_bytes(str(disk / "ckpt")) <= 1 << 20
    check_disk_space(str(disk / "ckpt"), 512 * 1024, 3, "checkpoint version 4")  # fits: no error
    with pytest.raises(NoSpaceForCheckpoint) as caught:
        check_disk_space(str(disk / "ckpt"), 2 << 20, 3, "checkpoint version 4")
    message = str(caught.value)
    assert message.startswith(f"{disk / 'ckpt'}: not enough disk space for checkpoint version 4: 2097152 bytes")
    assert f"free on the filesystem of {disk}; the committed version 3 is intact" in message
    assert "\n" not in message


def test_more_than_any_disk_has(tmp_path: Path) -> None:
    with pytest.raises(NoSpaceForCheckpoint, match="no version is committed yet, so nothing is lost"):
        check_disk_space(str(tmp_path / "ckpt"), 10**18, 0, "checkpoint version 1")


def test_object_stores_are_not_checked() -> None:
    check_disk_space("s3://bucket/ckpt", 10**18, 2, "checkpoint version 3")


def test_version_files_bytes_counts_that_version_hard_links_included(tmp_path: Path) -> None:
    (tmp_path / "embeddings_user_0.v3.h5").write_bytes(b"x" * 100)
    (tmp_path / "model.v3.h5").write_bytes(b"x" * 5000)
    (tmp_path / "embeddings_user_0.v2.h5").write_bytes(b"x" * 1000)
    area = tmp_path / "progress" / "v3-b5"
    area.mkdir(parents=True)
    (area / "embeddings_user_1.v3.h5").write_bytes(b"x" * 500)
    os.link(area / "embeddings_user_1.v3.h5", tmp_path / "embeddings_user_1.v3.h5")  # promoted: a copy needs room
    (tmp_path / "checkpoint_version.txt").write_text("2\n")
    blocks = [os.stat(tmp_path / n).st_blocks * 512 for n in ("embeddings_user_0.v3.h5", "model.v3.h5")]
    assert (
        version_files_bytes(str(tmp_path), 3) == sum(blocks) + os.stat(area / "embeddings_user_1.v3.h5").st_blocks * 512
    )
    assert version_files_bytes(str(tmp_path / "absent"), 3) == 0
    assert version_files_bytes("s3://bucket/ckpt", 3) == 0


def test_a_full_disk_is_recognised_in_every_form_it_arrives() -> None:
    assert is_out_of_space(OSError(errno.ENOSPC, "No space left on device"))
    assert is_out_of_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    # h5py: a plain OSError whose text carries HDF5's errno (no errno attribute on some paths).
    assert is_out_of_space(OSError("Can't synchronously write data (file write failed: errno = 28, ...)"))
    wrapped = RuntimeError("export failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert is_out_of_space(wrapped)
    assert not is_out_of_space(OSError(errno.EACCES, "Permission denied"))
    assert not is_out_of_space(OSError("Unable to open file (errno = 2, error message = 'No such file')"))
    assert not is_out_of_space(ValueError("28 rows"))


def test_outputs_on_one_filesystem_are_summed(small_disk: Callable[..., Path], tmp_path: Path) -> None:
    disk = small_disk(1 << 20)
    check_free_space([(str(disk / "a.tsv"), str(disk), 400_000), (str(disk / "b.tsv"), str(disk), 400_000)], "x")
    elsewhere = (str(tmp_path / "c.tsv"), str(tmp_path), 700_000)  # another filesystem: counted on its own
    with pytest.raises(NoSpaceForOutput) as caught:
        check_free_space(
            [(str(disk / "a.tsv"), str(disk / "out"), 400_000), elsewhere, (str(disk / "b.tsv"), str(disk), 700_000)],
            "the export",
        )
    message = str(caught.value)
    assert message.startswith(f"{disk / 'b.tsv'}: not enough disk space for the export: about 1,100,000 bytes")
    assert (
        f"needed by 2 files on the filesystem of {disk}, 1,048,576 bytes (1.0 MiB) free; nothing was written" in message
    )


def test_a_disk_that_filled_up_is_told_with_what_was_written(small_disk: Callable[..., Path]) -> None:
    disk = small_disk(64 << 10)
    with pytest.raises(OSError) as full, open(disk / "big.bin", "wb") as out:
        out.write(b"x" * (128 << 10))
        out.flush()
    error = no_space_while_writing(full.value, str(disk / "big.bin"), str(disk), 100_000, 65_536, "the export")
    assert str(error) == (
        f"{disk / 'big.bin'}: the disk filled up while writing the export: about 100,000 bytes (97.7 KiB) needed "
        f"on the filesystem of {disk}, 65,536 bytes (64.0 KiB) written, 0 bytes free; the partial files are "
        "removed (free some space, or write to a larger disk)"
    )


def test_a_filesystem_out_of_inodes_is_told_as_such(small_disk: Callable[..., Path]) -> None:
    disk = small_disk(1 << 20, inodes=2)
    (disk / "out").mkdir()  # the root and this: no inode left
    with pytest.raises(OSError) as full:
        (disk / "out" / "a.tsv").write_bytes(b"")
    error = no_space_while_writing(full.value, str(disk / "out" / "a.tsv"), str(disk / "out"), 10, 0, "the export")
    assert "the filesystem ran out of inodes (it can hold no more files) while writing the export" in str(error)
    assert str(error).endswith("1,048,576 bytes (1.0 MiB) free; the partial files are removed (remove some files)")


META = CheckpointMetadata(config_json="", iteration={"epoch_idx": 7, "edge_path": "/data/some/edge/path"})


@pytest.mark.parametrize("config_bytes", [0, 2_000, 30_000, 100_000])
@pytest.mark.parametrize(("rows", "dim"), [(1, 1), (200, 16), (10_000, 400)])
def test_an_embeddings_file_takes_at_most_the_estimate(tmp_path: Path, config_bytes: int, rows: int, dim: int) -> None:
    """Measured on real files: st_blocks * 512 <= the estimate < twice it + 64 KiB."""
    meta = replace(META, config_json="x" * config_bytes)
    state = state_to_bytes(RowAdagrad.state_dict(torch.zeros(rows), 0.1))
    CheckpointStore(str(tmp_path)).save_embeddings("n", 0, 1, torch.ones(rows, dim), state, meta)
    taken = os.stat(tmp_path / "embeddings_n_0.v1.h5").st_blocks * 512
    estimate = hdf5_file_bytes(rows * (dim + 1) * 4, attrs_bytes(meta.config_json))
    assert taken <= estimate < 2 * taken + 64 * 1024


@pytest.mark.parametrize(("parameters", "numel"), [(0, 0), (1, 16), (1_000, 16), (50, 40_000)])
def test_a_model_file_takes_at_most_the_estimate(tmp_path: Path, parameters: int, numel: int) -> None:
    names = {f"rhs_operators.{i}.diagonal": f"relations/{i}/operator/rhs/diagonal" for i in range(parameters)}
    state = {key: torch.ones(numel) for key in names}
    optim = {"state": {i: {"sum": torch.ones(numel), "step": torch.tensor(0.0)} for i in range(parameters)}}
    meta = replace(META, config_json="x" * 2_000)
    CheckpointStore(str(tmp_path)).save_model(1, state, names, state_to_bytes(optim), meta)
    taken = os.stat(tmp_path / "model.v1.h5").st_blocks * 512
    estimate = hdf5_file_bytes(8 * parameters * numel, attrs_bytes(meta.config_json), parameters + 1)
    assert taken <= estimate < 2 * taken + 64 * 1024


@pytest.mark.skipif(not os.path.isdir("/proc") or os.statvfs("/proc").f_blocks != 0, reason="no sizeless /proc here")
def test_a_filesystem_of_no_size_is_not_writable_rather_than_full() -> None:
    with pytest.raises(OutputNotWritable) as caught:
        check_free_space([("/proc/answers.tsv", "/proc", 1000)], "the prediction")
    assert str(caught.value) == (
        "/proc/answers.tsv: the directory /proc is not writable: its filesystem has no size (as /proc, /sys); "
        "write elsewhere"
    )
