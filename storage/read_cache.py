"""Local read cache for whole files read from remote stores (S3 and other object stores).

What it caches: the content of remote objects that :func:`storage.fs.reads.local_read_path`
hands out as local files (h5py needs a real path), so edge and embedding files re-read
every epoch cost one HEAD request instead of a download. Files just uploaded by
:func:`storage.fs.atomic.local_write` enter the cache for free. Local files never go through it,
and objects without an ETag are not cached (the caller downloads them to a temporary file).

Keys and validation: one file per (URL, endpoint, version), named
``<url hash>.<version hash><ext>``. The endpoint is part of the key because the same URL on
another server is another object. The version is the object's ETag and size
(:func:`version_of` on the HEAD answer), so a changed object gets a new name and misses;
a new version replaces the entries of older ones, and writes and deletes through
:mod:`storage.fs` drop every cached version of their URL (:func:`forget`).

Eviction: the total size is kept under ``PBG_CACHE_MAX_BYTES`` (default 20 GiB) by deleting
the least recently used entries; a hit refreshes the entry's mtime, which is the recency.

Location: ``PBG_CACHE_DIR``, else ``<system temp>/pbg-cache-<uid>`` (created with mode 0700).

Concurrency (threads and processes, no locks): downloads go to a private ``.part`` name and
are renamed into place, so readers never see a torn entry and racing downloaders only waste
a download. Readers get a private hard link (``.link``) to the entry, so an eviction by
another process cannot pull the file from under an open h5py handle; an entry evicted
between the check and the link is fetched again.

This module does no remote I/O itself: :mod:`storage.fs` passes the endpoint, the version
and a ``download(local_path)`` callable, which keeps the import one-way (fs -> read_cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import fsspec

logger = logging.getLogger(__name__)

CACHE_DIR_ENV = "PBG_CACHE_DIR"
CACHE_MAX_BYTES_ENV = "PBG_CACHE_MAX_BYTES"
DEFAULT_CACHE_MAX_BYTES = 20 << 30

# Suffixes of in-flight downloads and of readers' private links: never entries themselves.
_PRIVATE_SUFFIXES = (".part", ".link")


def cache_dir() -> str:
    """The read-cache directory: ``$PBG_CACHE_DIR``, else ``<system temp>/pbg-cache-<uid>`` (created)."""
    path = os.environ.get(CACHE_DIR_ENV) or os.path.join(tempfile.gettempdir(), f"pbg-cache-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def version_of(info: Mapping[str, Any]) -> str | None:
    """What identifies the content of a remote object (ETag and size), None without an ETag.

    Args:
        info: The object's ``fs.info()`` answer.
    """
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    return f"{etag}:{info.get('size')}" if etag else None


def endpoint_of(fs: fsspec.AbstractFileSystem) -> str:
    """The endpoint a remote filesystem talks to (part of the cache key): same URL, other server."""
    client_kwargs = getattr(fs, "client_kwargs", None) or {}
    return str(getattr(fs, "endpoint_url", None) or client_kwargs.get("endpoint_url") or "")


@contextlib.contextmanager
def open_entry(url: str, endpoint: str, version: str, download: Callable[[str], None]) -> Iterator[str]:
    """A private link to the cache entry of (url, version), downloading it first on a miss.

    Args:
        url: The remote URL (cache key, with ``endpoint``).
        endpoint: The endpoint the URL lives on, see :func:`endpoint_of`.
        version: The object's current version, see :func:`version_of`.
        download: Writes the object's content to the local path it is given.

    Yields:
        A local path valid for the duration of the block.
    """
    entry = _entry_path(url, endpoint, version)
    if os.path.exists(entry):
        logger.debug("read cache hit %s", url)
        with contextlib.suppress(FileNotFoundError):
            os.utime(entry)  # recency for eviction
    else:
        _fill(entry, download)
        _drop_versions(url, endpoint, keep=entry)
        _evict(keep=entry)
    link = _private_link(entry)
    if not link:
        with open_entry(url, endpoint, version, download) as again:
            yield again
        return
    try:
        yield link
    finally:
        if link != entry:
            _remove_if_exists(link)


def adopt(url: str, endpoint: str, version: str, local: str) -> None:
    """Move a just-uploaded local file into the cache as the entry of (url, version)."""
    entry = _entry_path(url, endpoint, version)
    os.replace(local, entry)
    _evict(keep=entry)


def forget(url: str, endpoint: str) -> None:
    """Delete every cached version of ``url``."""
    _drop_versions(url, endpoint, keep=None)


def _stem(url: str, endpoint: str) -> str:
    return hashlib.sha256(f"{endpoint}\n{url}".encode()).hexdigest()[:32]


def _entry_path(url: str, endpoint: str, version: str) -> str:
    ext = os.path.splitext(url)[1][:16]
    digest = hashlib.sha256(version.encode()).hexdigest()[:16]
    return os.path.join(cache_dir(), f"{_stem(url, endpoint)}.{digest}{ext}")


def _fill(entry: str, download: Callable[[str], None]) -> None:
    """Download into a private ``.part`` file and rename it to ``entry`` (never a torn entry)."""
    part = f"{entry}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part"
    try:
        download(part)
        os.replace(part, entry)
    finally:
        _remove_if_exists(part)


def _private_link(entry: str) -> str:
    """A private hard link to ``entry``; "" if it was evicted meanwhile; ``entry`` without hard links."""
    link = f"{entry}.{os.getpid()}.{uuid.uuid4().hex[:8]}.link"
    try:
        os.link(entry, link)
    except FileNotFoundError:  # evicted by another process between the check and the link
        return ""
    except OSError:  # no hard links on this filesystem: read the entry itself
        return entry
    return link


def _drop_versions(url: str, endpoint: str, keep: str | None) -> None:
    """Delete the cached versions of ``url`` other than ``keep``."""
    stem = _stem(url, endpoint) + "."
    for entry in os.scandir(cache_dir()):
        if entry.name.startswith(stem) and entry.path != keep and not entry.name.endswith(_PRIVATE_SUFFIXES):
            _remove_if_exists(entry.path)


def _evict(keep: str) -> None:
    """Delete least recently used entries until the cache fits in ``PBG_CACHE_MAX_BYTES``."""
    limit = int(os.environ.get(CACHE_MAX_BYTES_ENV) or DEFAULT_CACHE_MAX_BYTES)
    entries = []
    for entry in os.scandir(cache_dir()):
        if entry.is_file() and not entry.name.endswith(_PRIVATE_SUFFIXES):
            with contextlib.suppress(FileNotFoundError):
                stat = entry.stat()
                entries.append((stat.st_mtime, stat.st_size, entry.path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        if path != keep:
            _remove_if_exists(path)
            total -= size


def _remove_if_exists(local_path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(local_path)


__all__ = [
    "CACHE_DIR_ENV",
    "CACHE_MAX_BYTES_ENV",
    "DEFAULT_CACHE_MAX_BYTES",
    "adopt",
    "cache_dir",
    "endpoint_of",
    "forget",
    "open_entry",
    "version_of",
]
