"""Tests for storage.fs: URL resolution, atomic writes, copies, and the remote code path.

The remote path (download for reads, upload for writes) is exercised with fsspec's
in-memory filesystem, which stands in for object stores.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import fs
from storage.errors import BadDataError, DataNotFound


def test_resolve_plain_path_and_file_url(tmp_path: Path) -> None:
    for url in (str(tmp_path), f"file://{tmp_path}"):
        filesystem, path = fs.resolve(url)
        assert fs.is_local(filesystem)
        assert path == str(tmp_path)


def test_join_url_keeps_scheme() -> None:
    assert fs.join_url("s3://b/ckpt/", "epoch_5", "model.v5.h5") == "s3://b/ckpt/epoch_5/model.v5.h5"
    assert fs.join_url("file:///d", "x.txt") == "file:///d/x.txt"
    assert fs.join_url("/d", "x.txt") == "/d/x.txt"
    assert fs.join_url("/d") == "/d"


def test_write_and_read_text_round_trip(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/sub/dir/a.txt"
    fs.write_text_atomic(url, "héllo\n")
    assert fs.read_text(url) == "héllo\n"
    assert (tmp_path / "sub" / "dir" / "a.txt").read_text(encoding="utf-8") == "héllo\n"
    fs.write_text_atomic(url, "second")
    assert fs.read_text(url) == "second"
    # No temporary file is left next to the result.
    assert os.listdir(tmp_path / "sub" / "dir") == ["a.txt"]


def test_read_missing_raises_data_not_found_with_url(tmp_path: Path) -> None:
    url = str(tmp_path / "missing.txt")
    with pytest.raises(DataNotFound, match="missing.txt"):
        fs.read_text(url)


def test_read_non_utf8_is_bad_data(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_bytes(b"ok\xff")
    with pytest.raises(BadDataError, match="offset 2"):
        fs.read_text(str(tmp_path / "b.txt"))


def test_local_write_failure_keeps_previous_file_and_removes_tmp(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with fs.local_write(str(target)) as local:
            Path(local).write_text("new, half written")
            raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]


def test_local_write_replaces_stale_tmp(tmp_path: Path) -> None:
    (tmp_path / "f.tmp.txt").write_text("stale junk from a crash")
    with fs.local_write(str(tmp_path / "f.txt")) as local:
        assert local == str(tmp_path / "f.tmp.txt")
        assert not os.path.exists(local)
        Path(local).write_text("fresh")
    assert (tmp_path / "f.txt").read_text() == "fresh"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]


def test_exists_remove_listdir(tmp_path: Path) -> None:
    base = str(tmp_path)
    assert fs.listdir(fs.join_url(base, "nope")) == []
    fs.write_text_atomic(fs.join_url(base, "b.txt"), "1")
    fs.write_text_atomic(fs.join_url(base, "a.txt"), "2")
    fs.makedirs(fs.join_url(base, "epoch_1"))
    assert fs.listdir(base) == ["a.txt", "b.txt", "epoch_1"]
    assert fs.exists(fs.join_url(base, "a.txt"))
    fs.remove(fs.join_url(base, "a.txt"))
    assert not fs.exists(fs.join_url(base, "a.txt"))
    fs.remove(fs.join_url(base, "a.txt"))  # missing_ok by default
    with pytest.raises(DataNotFound, match="a.txt"):
        fs.remove(fs.join_url(base, "a.txt"), missing_ok=False)


def test_copy_is_an_independent_real_file(tmp_path: Path) -> None:
    src, dst = tmp_path / "src.bin", tmp_path / "snap" / "dst.bin"
    src.write_bytes(b"\x00\x01payload")
    fs.copy(str(src), str(dst))
    assert dst.read_bytes() == b"\x00\x01payload"
    assert not dst.is_symlink()
    src.write_bytes(b"changed")
    assert dst.read_bytes() == b"\x00\x01payload"
    with pytest.raises(DataNotFound):
        fs.copy(str(tmp_path / "nope"), str(dst))


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A fresh directory on fsspec's in-memory filesystem (a non-local filesystem)."""
    url = f"memory://pbg-test-{uuid.uuid4().hex}"
    yield url
    filesystem, path = fs.resolve(url)
    if filesystem.exists(path):
        filesystem.rm(path, recursive=True)


def test_remote_path_round_trips_through_local_temp_files(memory_url: str) -> None:
    filesystem, _ = fs.resolve(memory_url)
    assert not fs.is_local(filesystem)
    url = fs.join_url(memory_url, "x.txt")
    fs.write_text_atomic(url, "remote")
    assert fs.read_text(url) == "remote"
    with fs.local_read_path(url) as local:
        assert Path(local).read_text() == "remote"
    fs.copy(url, fs.join_url(memory_url, "epoch_1", "x.txt"))
    assert fs.read_text(fs.join_url(memory_url, "epoch_1", "x.txt")) == "remote"
    assert fs.listdir(memory_url) == ["epoch_1", "x.txt"]


def test_remote_write_failure_uploads_nothing(memory_url: str) -> None:
    url = fs.join_url(memory_url, "y.txt")
    with pytest.raises(RuntimeError):
        with fs.local_write(url) as local:
            Path(local).write_text("partial")
            raise RuntimeError("boom")
    assert not fs.exists(url)
    with pytest.raises(DataNotFound):
        with fs.local_read_path(url):
            pass
