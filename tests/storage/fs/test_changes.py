"""Tests for storage.fs.changes: exists/remove/listdir, real copies, server-side copies and ETag comparison."""

from __future__ import annotations

from pathlib import Path

import pytest
import store_io
from read_cache_entries import entries

from storage.errors import DataNotFound
from storage.fs import atomic, changes, reads, urls


def test_exists_remove_listdir(tmp_path: Path) -> None:
    base = str(tmp_path)
    assert reads.listdir(urls.join_url(base, "nope")) == []
    atomic.write_text_atomic(urls.join_url(base, "b.txt"), "1")
    atomic.write_text_atomic(urls.join_url(base, "a.txt"), "2")
    changes.makedirs(urls.join_url(base, "epoch_1"))
    assert reads.listdir(base) == ["a.txt", "b.txt", "epoch_1"]
    assert reads.exists(urls.join_url(base, "a.txt"))
    changes.remove(urls.join_url(base, "a.txt"))
    assert not reads.exists(urls.join_url(base, "a.txt"))
    changes.remove(urls.join_url(base, "a.txt"))  # missing_ok by default
    with pytest.raises(DataNotFound, match="a.txt"):
        changes.remove(urls.join_url(base, "a.txt"), missing_ok=False)


def test_copy_is_an_independent_real_file(tmp_path: Path) -> None:
    src, dst = tmp_path / "src.bin", tmp_path / "snap" / "dst.bin"
    src.write_bytes(b"\x00\x01payload")
    changes.copy(str(src), str(dst))
    assert dst.read_bytes() == b"\x00\x01payload"
    assert not dst.is_symlink()
    src.write_bytes(b"changed")
    assert dst.read_bytes() == b"\x00\x01payload"
    with pytest.raises(DataNotFound):
        changes.copy(str(tmp_path / "nope"), str(dst))


def test_server_side_copy_downloads_nothing(base: str, cache: Path) -> None:
    src, dst = urls.join_url(base, "embeddings_e_0.v3.h5"), urls.join_url(base, "epoch_1", "embeddings_e_0.v3.h5")
    store_io.put_bytes(src, b"abc" * 1000)
    changes.copy(src, dst)
    assert store_io.get_bytes(dst) == b"abc" * 1000
    assert entries(cache) == []  # a download would have gone through the read cache


def test_same_stored_object_compares_etags(s3_bucket: str, tmp_path: Path) -> None:
    from storage.fs import atomic, changes

    base = f"s3://{s3_bucket}/same"
    atomic.write_text_atomic(f"{base}/a.txt", "hello")
    assert not changes.same_stored_object(f"{base}/a.txt", f"{base}/b.txt")  # missing target
    changes.copy(f"{base}/a.txt", f"{base}/b.txt")
    assert changes.same_stored_object(f"{base}/a.txt", f"{base}/b.txt")
    atomic.write_text_atomic(f"{base}/b.txt", "hellO")  # same size, other bytes
    assert not changes.same_stored_object(f"{base}/a.txt", f"{base}/b.txt")
    (tmp_path / "x").write_text("hello")
    assert not changes.same_stored_object(str(tmp_path / "x"), f"{base}/a.txt")  # local files never count


def test_share_links_a_local_file_without_writing_its_bytes_again(tmp_path: Path) -> None:
    src, dst = tmp_path / "progress" / "v2-b3" / "e.h5", tmp_path / "e.v2.h5"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"partition")
    dst.write_bytes(b"older file at the target")
    changes.share(str(src), str(dst))
    assert dst.read_bytes() == b"partition"
    assert dst.stat().st_ino == src.stat().st_ino  # the same data on disk: nothing copied
    changes.remove_tree(str(tmp_path / "progress"))  # the progress area goes after the commit
    assert dst.read_bytes() == b"partition"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.v2.h5"]  # no temporary name left
    with pytest.raises(DataNotFound, match="nope"):
        changes.share(str(tmp_path / "nope"), str(dst))


def test_share_on_an_object_store_is_a_server_side_copy(base: str, cache: Path) -> None:
    src, dst = urls.join_url(base, "progress", "e.h5"), urls.join_url(base, "e.v2.h5")
    store_io.put_bytes(src, b"xyz" * 100)
    changes.share(src, dst)
    assert store_io.get_bytes(dst) == b"xyz" * 100
    assert entries(cache) == []
