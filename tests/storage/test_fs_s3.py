"""Tests for storage.fs against the moto S3 server: read cache, upload checks, fresh listings, restarts.

The read cache is observed through its files (an entry's inode changes only when it is
downloaded again), never through a stand-in for S3.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
import store_io
from fsspec.core import url_to_fs
from s3_server import S3Server

from storage import fs
from storage.errors import DataNotFound, StorageUnreachable, TransientStorageError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty read-cache directory for this test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("PBG_CACHE_DIR", str(path))
    return path


@pytest.fixture
def base(s3_bucket: str) -> str:
    return f"s3://{s3_bucket}/data"


def entries(cache: Path) -> list[str]:
    """Committed cache entries (no in-flight downloads, links or upload directories)."""
    if not cache.exists():
        return []
    return sorted(p.name for p in cache.iterdir() if p.is_file() and not p.name.endswith((".part", ".link")))


def read_via_cache(url: str) -> tuple[bytes, int]:
    """(content, inode) of what local_read_path gives for ``url``."""
    with fs.local_read_path(url) as local:
        return Path(local).read_bytes(), os.stat(local).st_ino


def test_read_cache_hit_miss_and_invalidation(base: str, cache: Path) -> None:
    url = fs.join_url(base, "edges_0_0.h5")
    store_io.put_bytes(url, b"version one")
    first, inode = read_via_cache(url)  # miss: downloaded
    assert first == b"version one" and len(entries(cache)) == 1
    again, inode_again = read_via_cache(url)  # hit: the same file, not downloaded again
    assert again == first and inode_again == inode and len(entries(cache)) == 1
    store_io.put_bytes(url, b"version two, longer")  # changed object: new ETag and size
    changed, inode_changed = read_via_cache(url)
    assert changed == b"version two, longer" and inode_changed != inode
    assert len(entries(cache)) == 1  # the entry of the old version is gone
    fs.remove(url)
    assert entries(cache) == []
    with pytest.raises(DataNotFound):
        read_via_cache(url)


def test_uploaded_file_enters_the_cache_and_local_files_never_do(base: str, cache: Path, tmp_path: Path) -> None:
    url = fs.join_url(base, "model.v1.h5")
    with fs.local_write(url) as local:
        Path(local).write_bytes(b"\x89HDF fake payload")
    [entry] = entries(cache)
    content, inode = read_via_cache(url)  # a hit on the uploaded bytes, no download
    assert content == b"\x89HDF fake payload" and inode == os.stat(cache / entry).st_ino
    local_file = tmp_path / "local.h5"
    local_file.write_bytes(b"local")
    with fs.local_read_path(str(local_file)) as path:
        assert path == str(local_file)
    assert entries(cache) == [entry]


def test_cache_is_bounded(base: str, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBG_CACHE_MAX_BYTES", "2500")
    urls = [fs.join_url(base, f"edges_0_{i}.h5") for i in range(3)]
    for i, url in enumerate(urls):
        store_io.put_bytes(url, bytes([i]) * 1000)
        assert read_via_cache(url)[0] == bytes([i]) * 1000
    # 3000 bytes read, 2500 allowed: the least recently used entry was evicted.
    assert len(entries(cache)) == 2
    assert sum((cache / e).stat().st_size for e in entries(cache)) == 2000
    assert read_via_cache(urls[0])[0] == bytes([0]) * 1000  # evicted entries are downloaded again


def test_concurrent_readers_share_one_entry(base: str, cache: Path) -> None:
    url = fs.join_url(base, "edges_1_1.h5")
    payload = os.urandom(200_000)
    store_io.put_bytes(url, payload)
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(read_via_cache(url)[0])) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [payload] * 4 and len(entries(cache)) == 1


def test_upload_is_verified_against_size_and_md5(base: str) -> None:
    url = fs.join_url(base, "x.bin")
    data = b"payload to verify"
    fs.write_text_atomic(url, data.decode())
    filesystem, path = fs.resolve(url)
    info = filesystem.info(path)
    assert info["ETag"].strip('"') == hashlib.md5(data).hexdigest() and info["size"] == len(data)
    # What a torn or foreign object looks like to the check: retryable, names both sides.
    with pytest.raises(TransientStorageError, match=r"stored 17 bytes .* expected 18 bytes"):
        fs._verify_upload(filesystem, path, url, len(data) + 1, None)
    with pytest.raises(TransientStorageError, match="expected 17 bytes with MD5 0123"):
        fs._verify_upload(filesystem, path, url, len(data), "0123" + "0" * 28)
    assert fs._verify_upload(filesystem, path, url, len(data), hashlib.md5(data).hexdigest())["size"] == 17


def test_server_side_copy_downloads_nothing(base: str, cache: Path) -> None:
    src, dst = fs.join_url(base, "embeddings_e_0.v3.h5"), fs.join_url(base, "epoch_1", "embeddings_e_0.v3.h5")
    store_io.put_bytes(src, b"abc" * 1000)
    fs.copy(src, dst)
    assert store_io.get_bytes(dst) == b"abc" * 1000
    assert entries(cache) == []  # a download would have gone through the read cache


def test_listings_are_fresh_across_filesystem_objects(base: str) -> None:
    assert fs.listdir(base) == []
    store_io.put_bytes(fs.join_url(base, "model.v1.h5"), b"1")  # another client writes
    assert fs.listdir(base) == ["model.v1.h5"]
    assert fs.exists(fs.join_url(base, "model.v1.h5"))
    # A second, differently configured filesystem object (another store) writes and deletes.
    other = {"config_kwargs": {"connect_timeout": 5}}
    fs.write_text_atomic(fs.join_url(base, "checkpoint_version.txt"), "1\n", other)
    assert fs.listdir(base) == ["checkpoint_version.txt", "model.v1.h5"]
    fs.remove(fs.join_url(base, "model.v1.h5"), storage_options=other)
    assert fs.listdir(base) == ["checkpoint_version.txt"]
    assert not fs.exists(fs.join_url(base, "model.v1.h5"))


def test_server_stop_is_unreachable_and_start_resumes_on_same_port(s3_server: S3Server, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/ckpt/checkpoint_version.txt"
    fs.write_text_atomic(url, "3\n")
    port = s3_server.port
    s3_server.stop()
    try:
        with pytest.raises(StorageUnreachable):  # refused on a loopback address: not retried
            fs.read_text(url)
    finally:
        s3_server.start()
    assert s3_server.port == port and s3_server.running
    # moto keeps no state across restarts: the bucket is gone, which is a plain DataNotFound.
    with pytest.raises(DataNotFound):
        fs.read_text(url)
    filesystem, _ = url_to_fs(url, skip_instance_cache=True)
    filesystem.mkdir(s3_bucket)
    fs.write_text_atomic(url, "4\n")  # the cached filesystem object works again after the restart
    assert fs.read_text(url) == "4\n"


def test_same_stored_object_compares_etags(s3_bucket: str, tmp_path: Path) -> None:
    from storage import fs

    base = f"s3://{s3_bucket}/same"
    fs.write_text_atomic(f"{base}/a.txt", "hello")
    assert not fs.same_stored_object(f"{base}/a.txt", f"{base}/b.txt")  # missing target
    fs.copy(f"{base}/a.txt", f"{base}/b.txt")
    assert fs.same_stored_object(f"{base}/a.txt", f"{base}/b.txt")
    fs.write_text_atomic(f"{base}/b.txt", "hellO")  # same size, other bytes
    assert not fs.same_stored_object(f"{base}/a.txt", f"{base}/b.txt")
    (tmp_path / "x").write_text("hello")
    assert not fs.same_stored_object(str(tmp_path / "x"), f"{base}/a.txt")  # local files never count
