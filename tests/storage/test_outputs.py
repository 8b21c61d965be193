"""storage.outputs: distinct output files, none an input, room for them, all or nothing on disk, replaced on demand.

The command-line side of ``pbg export`` (the options named, the files on disk byte-identical) is in
tests/flows/cli/test_commands.py; here the mechanism, on real files, a real small tmpfs and S3.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from disk_state import changes, tree_state
from store_io import exists, get_text, join, put_text

from storage.disk_space import NoSpaceForOutput
from storage.errors import OutputExistsError
from storage.outputs import OutputsOverlap, check_distinct, place, staged_outputs


def test_one_file_is_one_place_however_it_is_spelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "sub")
    (tmp_path / "link.tsv").symlink_to(tmp_path / "sub" / "x.tsv")  # dangling: writing it writes sub/x.tsv
    target = str(tmp_path / "sub" / "x.tsv")
    spellings = ["sub/x.tsv", "./sub/x.tsv", "sub/../sub/x.tsv", target, f"file://{target}", "alias/x.tsv", "link.tsv"]
    assert {place(spelling) for spelling in spellings} == {target}
    assert place("s3://bucket/a//b/./x.tsv") == "s3://bucket/a/b/x.tsv"


@pytest.mark.parametrize("second", ["x.tsv", "./x.tsv", "{root}/x.tsv", "alias/x.tsv"])
def test_two_outputs_that_are_one_file_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, second: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "alias").symlink_to(tmp_path)
    second = second.format(root=tmp_path)
    with pytest.raises(OutputsOverlap) as caught:
        check_distinct([("--entities-output", "x.tsv"), ("--relation-types-output", second)], what="export")
    spelled = "'x.tsv' for both" if second == "x.tsv" else f"'x.tsv' and {second!r}"
    assert str(caught.value) == (
        f"{second}: --entities-output and --relation-types-output name the same file {tmp_path / 'x.tsv'} "
        f"({spelled}); give each its own file"
    )


def test_an_output_that_is_an_input_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "model.v1.h5").write_bytes(b"model")
    inputs = {
        "input_files": [("the config", "config.json")],
        "input_dirs": [("checkpoint_path", "ckpt")],
        "what": "export",
    }
    with pytest.raises(OutputsOverlap, match=r"^./config.json: --out names .*config.json, the config this export"):
        check_distinct([("--out", "./config.json")], **inputs)
    with pytest.raises(OutputsOverlap, match=r"a file of checkpoint_path ckpt that this export reads"):
        check_distinct([("--out", "ckpt/model.v1.h5")], **inputs)
    check_distinct([("--out", "ckpt/export.tsv"), ("--other", "export.tsv")], **inputs)  # new files: fine


def test_existing_outputs_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "b.tsv").write_text("keep")
    before = tree_state(tmp_path)
    sizes = {str(tmp_path / "new" / "a.tsv"): 10, str(tmp_path / "b.tsv"): 10}
    with (
        pytest.raises(OutputExistsError, match="refusing to overwrite export output"),
        staged_outputs(sizes, None, what="export"),
    ):
        pytest.fail("the block must not run")
    assert changes(before, tree_state(tmp_path)) == [] and not (tmp_path / "new").exists()


def test_a_disk_too_small_is_refused_before_anything_is_written(small_disk: Callable[..., Path]) -> None:
    disk = small_disk(64 << 10)
    sizes = {str(disk / "out" / "a.tsv"): 40_000, str(disk / "out" / "b.tsv"): 40_000}
    with pytest.raises(NoSpaceForOutput) as caught, staged_outputs(sizes, None, what="export"):
        pytest.fail("the block must not run")
    assert str(caught.value).startswith(f"{disk / 'out' / 'a.tsv'}: not enough disk space for the export: about 80,000")
    assert tree_state(disk) == {} and not (disk / "out").exists()


def test_a_disk_that_fills_up_while_writing_leaves_nothing(small_disk: Callable[..., Path]) -> None:
    """The estimate fits, the writing does not: the error names the output being written, not the OS's."""
    disk = small_disk(64 << 10)
    first, second = str(disk / "out" / "a.tsv"), str(disk / "out" / "b.tsv")
    with (
        pytest.raises(NoSpaceForOutput) as caught,
        staged_outputs({first: 1_000, second: 1_000}, None, what="export") as staging,
    ):
        Path(staging.path(first)).write_bytes(b"a" * 1_000)
        with open(staging.path(second), "wb") as out:
            for _ in range(100):
                out.write(os.urandom(1 << 10))
    message = str(caught.value)
    assert message.startswith(
        f"{second}: the disk filled up while writing the export: about 2,000 bytes (2.0 KiB) needed"
    )
    assert "0 bytes free; the partial files are removed" in message
    assert isinstance(caught.value.__cause__, OSError)
    assert tree_state(disk) == {} and not (disk / "out").exists()


def test_replace_publishes_over_existing_outputs_and_creates_new_ones(store_root: str) -> None:
    """``--force``: an existing output gets the new bytes at publish, a new one appears beside it."""
    old, new = join(store_root, "out", "old.tsv"), join(store_root, "out", "new.tsv")
    put_text(old, "old rows\n")
    with staged_outputs({old: 10, new: 10}, None, what="prediction", replace=True) as staging:
        Path(staging.path(old)).write_text("fresh rows\n")
        Path(staging.path(new)).write_text("more rows\n")
        assert get_text(old) == "old rows\n" and not exists(new)  # nothing published before the block ends
    assert (get_text(old), get_text(new)) == ("fresh rows\n", "more rows\n")


def test_replace_keeps_the_old_output_when_the_command_fails(store_root: str) -> None:
    """A failure before publishing leaves the existing file byte-identical and removes what was new."""
    old, new = join(store_root, "out", "old.tsv"), join(store_root, "out", "sub", "new.tsv")
    put_text(old, "old rows\n")
    before = tree_state(store_root)
    outputs = {old: 10, new: 10}
    with pytest.raises(RuntimeError, match="failed"), staged_outputs(outputs, None, what="x", replace=True) as staging:
        Path(staging.path(old)).write_text("half")
        Path(staging.path(new)).write_text("half")
        raise RuntimeError("scoring failed")
    assert changes(before, tree_state(store_root)) == []


def test_without_replace_an_existing_output_names_the_command(tmp_path: Path) -> None:
    (tmp_path / "p.tsv").write_text("keep")
    before = tree_state(tmp_path)
    refused = pytest.raises(OutputExistsError, match=r"p.tsv: refusing to overwrite prediction output\(s\) .*p.tsv$")
    with refused, staged_outputs({str(tmp_path / "p.tsv"): 10}, None, what="prediction"):
        pytest.fail("the block must not run")
    assert changes(before, tree_state(tmp_path)) == []


def test_replace_never_replaces_a_directory(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "keep.tsv").write_text("keep")
    before = tree_state(tmp_path)
    refused = pytest.raises(OutputExistsError, match=r"results: is a directory, and the prediction replaces files only")
    with refused, staged_outputs({str(tmp_path / "results"): 10}, None, what="prediction", replace=True):
        pytest.fail("the block must not run")
    assert changes(before, tree_state(tmp_path)) == []
