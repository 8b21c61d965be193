"""storage.importing.space: an import that does not fit its disk fails naming the path, what it
needed and what was free, with the previous import intact.

Real full disks: ``small_disk`` mounts a small tmpfs (needs root; skipped elsewhere). The
pre-check is tried on a disk too small for the outputs; the write itself filling the disk, by
filling the tmpfs while the import is held after its check (``PBG_PAUSE_AT``); and pass 1's spill
filling its directory. Nothing here is simulated: every ENOSPC comes from the kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pyarrow as pa
import pytest
from disk_state import changes, tree_state

from pbg_core.config import parse_config
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.importing.space import NoSpaceForImport, bucket_bytes, check_output_space, is_disk_full, names_bytes


def config_on(disk: Path, partitions: int = 2) -> Any:
    return parse_config(
        {
            "entities": {"n": {"num_partitions": partitions}},
            "relations": [{"name": "r", "lhs": "n", "rhs": "n"}],
            "dimension": 4,
            "entity_path": str(disk / "data"),
            "edge_paths": [str(disk / "data" / "edges")],
            "checkpoint_path": str(disk / "ckpt"),
        }
    )


def edges_file(path: Path, num_edges: int, num_nodes: int) -> str:
    path.write_text("".join(f"n{i % num_nodes}\tn{(i * 7 + 1) % num_nodes}\n" for i in range(num_edges)))
    return str(path)


def used_bytes(directory: Path) -> int:
    return sum(-(-os.path.getsize(p) // 4096) * 4096 for p in directory.rglob("*") if p.is_file())


def test_the_estimate_covers_what_an_import_writes(tmp_path: Path) -> None:
    config = config_on(tmp_path, partitions=4)
    import_edges(config, [edges_file(tmp_path / "e.tsv", 20_000, 3_000)], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    edges = Path(config.edge_paths[0])
    sizes = []
    for bucket in sorted(edges.glob("edges_*.h5")):
        with h5py.File(bucket, "r") as hf:
            sizes.append(len(hf["lhs"]))
    assert sum(sizes) == 20_000 and bucket_bytes(sizes, weighted=False) >= used_bytes(edges)
    data = Path(config.entity_path)
    names = [n for part in range(4) for n in json.loads((data / f"entity_names_n_{part}.json").read_text())]
    entity_files = [*data.glob("entity_names_*.json"), *data.glob("entity_count_*.txt")]
    assert names_bytes(pa.array(names), 4) >= sum(-(-os.path.getsize(f) // 4096) * 4096 for f in entity_files)


def test_an_import_too_big_for_its_disk_is_refused_before_writing(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    disk = small_disk(1 << 20)
    config = config_on(disk)
    import_edges(config, [edges_file(tmp_path / "small.tsv", 200, 50)], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    before = tree_state(disk)
    big = edges_file(tmp_path / "big.tsv", 60_000, 5_000)  # about 1.5 MB of bucket files
    with pytest.raises(NoSpaceForImport) as refused:
        import_edges(config, [big], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    message = str(refused.value)
    assert message.startswith(f"{disk / 'data' / 'edges'}: not enough disk space to write the import: ")
    assert (
        f"needed on the filesystem of {disk / 'data' / 'edges'}, " in message
        and " free; nothing was written" in message
    )
    assert "\n" not in message and "HDF5" not in message
    assert changes(before, tree_state(disk)) == []


def test_a_disk_filled_while_writing_is_named_and_the_import_undone(
    tmp_path: Path, small_disk: Callable[[int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = small_disk(2 << 20)
    config = config_on(disk)
    import_edges(config, [edges_file(tmp_path / "small.tsv", 200, 50)], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    before = tree_state(disk)
    bigger = edges_file(tmp_path / "bigger.tsv", 20_000, 2_000)  # fits: about 0.5 MB
    pause = tmp_path / "paused"
    monkeypatch.setenv("PBG_PAUSE_AT", "import-space-checked")
    monkeypatch.setenv("PBG_PAUSE_FILE", str(pause))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            import_edges(config, [bigger], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    while not pause.exists():
        assert thread.is_alive(), failure
        thread.join(0.02)
    filler = disk / "filler"  # another program takes the room the check saw
    with open(filler, "wb") as handle:
        handle.write(b"\0" * (shutil.disk_usage(disk).free - 16 * 1024))
    pause.unlink()
    thread.join()
    filler.unlink()
    assert len(failure) == 1 and isinstance(failure[0], NoSpaceForImport), failure
    message = str(failure[0])
    assert message.startswith(f"{disk / 'data' / 'edges'}: disk full while writing the import: ")
    assert " needed, " in message and f"free on the filesystem of {disk / 'data' / 'edges'}" in message
    assert "the import was undone (an earlier import there is intact)" in message and "\n" not in message
    assert changes(before, tree_state(disk)) == []


def test_a_spill_that_fills_its_disk_is_named(
    tmp_path: Path, small_disk: Callable[[int], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    spill = small_disk(1 << 20)
    monkeypatch.setattr(tempfile, "tempdir", str(spill))  # where pass 1 spills (TMPDIR)
    config = config_on(tmp_path)
    big = edges_file(tmp_path / "big.tsv", 150_000, 5_000)  # 12 bytes an edge: 1.8 MB of spill
    with pytest.raises(NoSpaceForImport) as refused:
        import_edges(config, [big], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    message = str(refused.value)
    assert message.startswith(f"{spill}/pbg-import-spill-") and f"disk full while pass 1 spilled {big} here" in message
    assert "point TMPDIR to a directory on a larger disk" in message
    assert not (tmp_path / "data").exists() and list(spill.iterdir()) == []


def test_object_stores_are_not_checked_and_errors_are_recognised() -> None:
    check_output_space([("s3://bucket/data", 10**18)])
    assert is_disk_full(OSError(28, "No space left on device"))
    wrapped = RuntimeError(
        "Can't write data (file write failed: errno = 28, error message = 'No space left on device')"
    )
    assert is_disk_full(wrapped) and not is_disk_full(OSError(13, "Permission denied"))
