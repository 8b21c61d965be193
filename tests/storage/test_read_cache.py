"""storage.read_cache: hits, misses, versions, invalidation and LRU eviction, on a real directory."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from storage import read_cache

URL = "s3://bucket/run/embeddings_a_0.v3.h5"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(read_cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(read_cache.CACHE_MAX_BYTES_ENV, raising=False)
    return tmp_path / "cache"


def _downloader(content: bytes, calls: list[str]) -> Callable[[str], None]:
    def download(path: str) -> None:
        calls.append(path)
        Path(path).write_bytes(content)

    return download


def _read(url: str, version: str, download: Callable[[str], None], endpoint: str = "http://127.0.0.1:1") -> bytes:
    with read_cache.open_entry(url, endpoint, version, download) as local:
        return Path(local).read_bytes()


def _entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir())


def test_a_miss_downloads_once_then_hits_and_leaves_no_private_files(cache: Path) -> None:
    calls: list[str] = []
    assert _read(URL, "e1:5", _downloader(b"first", calls)) == b"first"
    assert _read(URL, "e1:5", _downloader(b"never", calls)) == b"first"
    assert len(calls) == 1 and calls[0].endswith(".part")
    (entry,) = _entries(cache)
    assert entry.endswith(".h5")  # the URL's extension is kept (h5py opens it)


def test_a_new_version_misses_and_replaces_the_old_one(cache: Path) -> None:
    calls: list[str] = []
    _read(URL, "e1:5", _downloader(b"first", calls))
    assert _read(URL, "e2:6", _downloader(b"second", calls)) == b"second"
    assert len(calls) == 2 and len(_entries(cache)) == 1


def test_the_endpoint_is_part_of_the_key() -> None:
    calls: list[str] = []
    _read(URL, "e1:5", _downloader(b"here", calls), endpoint="http://127.0.0.1:1")
    assert _read(URL, "e1:5", _downloader(b"there", calls), endpoint="http://127.0.0.1:2") == b"there"


def test_forget_drops_every_version_and_adopt_makes_an_upload_a_hit(cache: Path, tmp_path: Path) -> None:
    calls: list[str] = []
    _read(URL, "e1:5", _downloader(b"first", calls))
    read_cache.forget(URL, "http://127.0.0.1:1")
    assert _entries(cache) == []
    uploaded = tmp_path / "upload.h5"
    uploaded.write_bytes(b"uploaded")
    read_cache.adopt(URL, "http://127.0.0.1:1", "e3:8", str(uploaded))
    assert not uploaded.exists()
    assert _read(URL, "e3:8", _downloader(b"never", calls)) == b"uploaded" and len(calls) == 1


def test_eviction_removes_the_least_recently_used_entries(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(read_cache.CACHE_MAX_BYTES_ENV, "35")
    calls: list[str] = []
    for i, name in enumerate("abc"):  # 30 bytes: all fit
        _read(f"s3://b/{name}", "v:10", _downloader(bytes(10), calls))
        for path in cache.iterdir():  # explicit recency: a oldest (mtime resolution may be coarse)
            if path.name.startswith(_stem(name)):
                os.utime(path, (1000 + i, 1000 + i))
    _read("s3://b/a", "v:10", _downloader(bytes(10), calls))  # a hit refreshes a's recency
    assert len(calls) == 3
    _read("s3://b/d", "v:10", _downloader(bytes(10), calls))  # 40 bytes > 35: drop the oldest, b
    assert sorted(p.name[:32] for p in cache.iterdir()) == sorted(_stem(n) for n in "acd")


def _stem(name: str) -> str:
    return read_cache._stem(f"s3://b/{name}", "http://127.0.0.1:1")


@pytest.mark.parametrize(
    ("info", "want"),
    [({"ETag": '"abc"', "size": 3}, "abc:3"), ({"etag": "x", "size": 0}, "x:0"), ({"size": 3}, None)],
)
def test_version_is_etag_and_size_and_none_without_an_etag(info: dict, want: str | None) -> None:
    assert read_cache.version_of(info) == want
