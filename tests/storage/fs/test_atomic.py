"""Tests for storage.fs.atomic: atomic writes on local disk (tmp + fsync + rename), on a non-local
filesystem, and on every store (``root``: local disk and the moto S3 server).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import store_io
from store_io import StorePath

from storage.errors import DataNotFound
from storage.fs import atomic, changes, reads, urls


def test_write_and_read_text_round_trip(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/sub/dir/a.txt"
    atomic.write_text_atomic(url, "héllo\n")
    assert reads.read_text(url) == "héllo\n"
    assert (tmp_path / "sub" / "dir" / "a.txt").read_text(encoding="utf-8") == "héllo\n"
    atomic.write_text_atomic(url, "second")
    assert reads.read_text(url) == "second"
    # No temporary file is left next to the result.
    assert os.listdir(tmp_path / "sub" / "dir") == ["a.txt"]


def test_local_write_failure_keeps_previous_file_and_removes_tmp(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic.local_write(str(target)) as local:
        Path(local).write_text("new, half written")
        raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]


def test_local_write_replaces_stale_tmp(tmp_path: Path) -> None:
    (tmp_path / "f.tmp.txt").write_text("stale junk from a crash")
    with atomic.local_write(str(tmp_path / "f.txt")) as local:
        assert local == str(tmp_path / "f.tmp.txt")
        assert not os.path.exists(local)
        Path(local).write_text("fresh")
    assert (tmp_path / "f.txt").read_text() == "fresh"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A fresh directory on fsspec's in-memory filesystem (a non-local filesystem)."""
    url = f"memory://pbg-test-{uuid.uuid4().hex}"
    yield url
    filesystem, path = urls.resolve(url)
    if filesystem.exists(path):
        filesystem.rm(path, recursive=True)


def test_remote_path_round_trips_through_local_temp_files(memory_url: str) -> None:
    filesystem, _ = urls.resolve(memory_url)
    assert not urls.is_local(filesystem)
    url = urls.join_url(memory_url, "x.txt")
    atomic.write_text_atomic(url, "remote")
    assert reads.read_text(url) == "remote"
    with reads.local_read_path(url) as local:
        assert Path(local).read_text() == "remote"
    changes.copy(url, urls.join_url(memory_url, "epoch_1", "x.txt"))
    assert reads.read_text(urls.join_url(memory_url, "epoch_1", "x.txt")) == "remote"
    assert reads.listdir(memory_url) == ["epoch_1", "x.txt"]


def test_remote_write_failure_uploads_nothing(memory_url: str) -> None:
    url = urls.join_url(memory_url, "y.txt")
    with pytest.raises(RuntimeError), atomic.local_write(url) as local:
        Path(local).write_text("partial")
        raise RuntimeError("boom")
    assert not reads.exists(url)
    with pytest.raises(DataNotFound), reads.local_read_path(url):
        pass


def test_round_trip_on_every_store(root: StorePath) -> None:
    base = str(root)
    url = urls.join_url(base, "sub", "a.txt")
    assert not reads.exists(url) and reads.listdir(base) == []
    atomic.write_text_atomic(url, "héllo\n")
    assert reads.read_text(url) == "héllo\n" and (root / "sub" / "a.txt").read_text() == "héllo\n"
    atomic.write_text_atomic(url, "second")  # overwrite: one object / one file, no leftovers
    assert reads.read_text(url) == "second"
    assert store_io.all_files(base) == ["sub/a.txt"]
    changes.copy(url, urls.join_url(base, "epoch_1", "a.txt"))
    assert reads.listdir(base) == ["epoch_1", "sub"]
    atomic.write_text_atomic(url, "third")  # the copy is independent of its source
    assert reads.read_text(urls.join_url(base, "epoch_1", "a.txt")) == "second"
    changes.move(urls.join_url(base, "epoch_1", "a.txt"), urls.join_url(base, "moved", "b.txt"))
    assert store_io.all_files(base) == ["moved/b.txt", "sub/a.txt"]
    changes.remove(url)
    assert not reads.exists(url)
    with pytest.raises(DataNotFound, match="a.txt"):
        changes.remove(url, missing_ok=False)
    changes.remove_tree(urls.join_url(base, "moved"))
    assert store_io.all_files(base) == []


def test_write_failure_publishes_nothing(root: StorePath) -> None:
    url = str(root / "y.h5")
    with pytest.raises(RuntimeError), atomic.local_write(url) as local:
        Path(local).write_text("partial")
        raise RuntimeError("boom")
    assert not reads.exists(url) and store_io.all_files(str(root)) == []


def test_create_exclusive_creates_once(root: StorePath) -> None:
    url = str(root / "ckpt" / "lease.json")
    assert atomic.create_exclusive(url, '{"run": "a"}') is True
    assert atomic.create_exclusive(url, '{"run": "b"}') is False
    assert (root / "ckpt" / "lease.json").read_text() == '{"run": "a"}'
    assert [p.name for p in (root / "ckpt").iterdir()] == ["lease.json"]  # no temporary left
    changes.remove(url)
    assert atomic.create_exclusive(url, '{"run": "b"}') is True


def test_an_interrupt_during_the_commit_leaves_the_previous_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C while the written file is fsynced (before its rename) leaves the directory as it was."""
    target = tmp_path / "journal.json"
    target.write_text("previous")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text_atomic(str(target), "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.json"]
    assert target.read_text() == "previous"
