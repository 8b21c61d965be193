"""Tests for storage.fs.reads: reads and their errors, and the read cache and listings against the moto S3 server.

The read cache is observed through its files (an entry's inode changes only when it is
downloaded again), never through a stand-in for S3.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import store_io
from read_cache_entries import entries
from store_io import StorePath

from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, changes, reads, urls


def test_read_missing_raises_data_not_found_with_url(tmp_path: Path) -> None:
    url = str(tmp_path / "missing.txt")
    with pytest.raises(DataNotFound, match="missing.txt"):
        reads.read_text(url)


def test_read_non_utf8_is_bad_data(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_bytes(b"ok\xff")
    with pytest.raises(BadDataError, match="offset 2"):
        reads.read_text(str(tmp_path / "b.txt"))


def test_missing_object_is_data_not_found_naming_url(root: StorePath) -> None:
    url = str(root / "missing.h5")
    with pytest.raises(DataNotFound, match="missing.h5"):
        reads.read_text(url)
    with pytest.raises(DataNotFound, match="missing.h5"), reads.local_read_path(url):
        pass
    with pytest.raises(DataNotFound, match="missing.h5"):
        changes.copy(url, str(root / "copy.h5"))


def test_read_json_of_a_missing_an_invalid_and_a_valid_file(root: StorePath) -> None:
    url = str(root / "best.json")
    with pytest.raises(DataNotFound, match="best.json"):
        reads.read_json(url)
    (root / "best.json").write_text('{"format": 1,\n "metric": }')
    with pytest.raises(BadDataError) as info:
        reads.read_json(url)
    assert str(info.value) == f"{url}: invalid JSON at line 2 column 12: Expecting value"
    (root / "best.json").write_text('{"format": 1, "metric": "mrr"}\n')
    assert reads.read_json(url) == reads.JsonFile({"format": 1, "metric": "mrr"}, '{"format": 1, "metric": "mrr"}\n')


def read_via_cache(url: str) -> tuple[bytes, int]:
    """(content, inode) of what local_read_path gives for ``url``."""
    with reads.local_read_path(url) as local:
        return Path(local).read_bytes(), os.stat(local).st_ino


def test_read_cache_hit_miss_and_invalidation(base: str, cache: Path) -> None:
    url = urls.join_url(base, "edges_0_0.h5")
    store_io.put_bytes(url, b"version one")
    first, inode = read_via_cache(url)  # miss: downloaded
    assert first == b"version one" and len(entries(cache)) == 1
    again, inode_again = read_via_cache(url)  # hit: the same file, not downloaded again
    assert again == first and inode_again == inode and len(entries(cache)) == 1
    store_io.put_bytes(url, b"version two, longer")  # changed object: new ETag and size
    changed, inode_changed = read_via_cache(url)
    assert changed == b"version two, longer" and inode_changed != inode
    assert len(entries(cache)) == 1  # the entry of the old version is gone
    changes.remove(url)
    assert entries(cache) == []
    with pytest.raises(DataNotFound):
        read_via_cache(url)


def test_uploaded_file_enters_the_cache_and_local_files_never_do(base: str, cache: Path, tmp_path: Path) -> None:
    url = urls.join_url(base, "model.v1.h5")
    with atomic.local_write(url) as local:
        Path(local).write_bytes(b"\x89HDF fake payload")
    [entry] = entries(cache)
    content, inode = read_via_cache(url)  # a hit on the uploaded bytes, no download
    assert content == b"\x89HDF fake payload" and inode == os.stat(cache / entry).st_ino
    local_file = tmp_path / "local.h5"
    local_file.write_bytes(b"local")
    with reads.local_read_path(str(local_file)) as path:
        assert path == str(local_file)
    assert entries(cache) == [entry]


def test_cache_is_bounded(base: str, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PBG_CACHE_MAX_BYTES", "2500")
    edge_urls = [urls.join_url(base, f"edges_0_{i}.h5") for i in range(3)]
    for i, url in enumerate(edge_urls):
        store_io.put_bytes(url, bytes([i]) * 1000)
        assert read_via_cache(url)[0] == bytes([i]) * 1000
    # 3000 bytes read, 2500 allowed: the least recently used entry was evicted.
    assert len(entries(cache)) == 2
    assert sum((cache / e).stat().st_size for e in entries(cache)) == 2000
    assert read_via_cache(edge_urls[0])[0] == bytes([0]) * 1000  # evicted entries are downloaded again


def test_concurrent_readers_share_one_entry(base: str, cache: Path) -> None:
    url = urls.join_url(base, "edges_1_1.h5")
    payload = os.urandom(200_000)
    store_io.put_bytes(url, payload)
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(read_via_cache(url)[0])) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [payload] * 4 and len(entries(cache)) == 1


def test_listings_are_fresh_across_filesystem_objects(base: str) -> None:
    assert reads.listdir(base) == []
    store_io.put_bytes(urls.join_url(base, "model.v1.h5"), b"1")  # another client writes
    assert reads.listdir(base) == ["model.v1.h5"]
    assert reads.exists(urls.join_url(base, "model.v1.h5"))
    # A second, differently configured filesystem object (another store) writes and deletes.
    other = {"config_kwargs": {"connect_timeout": 5}}
    atomic.write_text_atomic(urls.join_url(base, "checkpoint_version.txt"), "1\n", other)
    assert reads.listdir(base) == ["checkpoint_version.txt", "model.v1.h5"]
    changes.remove(urls.join_url(base, "model.v1.h5"), storage_options=other)
    assert reads.listdir(base) == ["checkpoint_version.txt"]
    assert not reads.exists(urls.join_url(base, "model.v1.h5"))
