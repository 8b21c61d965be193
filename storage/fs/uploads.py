"""Uploads: a complete local file put on an object store in one go, then verified.

An object appears only when its upload completes (multipart included), so a reader never sees a
partial one. After the upload the stored size, and the ETag against the MD5 of a single-part
upload, must match, else :class:`~storage.errors.TransientStorageError` (retryable). Any cached
copy of the old object (:mod:`storage.read_cache`) is dropped.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import fsspec

from storage import read_cache
from storage.errors import TransientStorageError
from storage.fs.urls import translate_errors


def upload_file(local: str, fs: fsspec.AbstractFileSystem, path: str, url: str) -> dict[str, Any]:
    """Upload a complete local file to ``path`` of a remote ``fs``, verified; its stored info.

    One PUT, or a multipart upload that publishes on completion: never a partial object.
    Any cached copy of the old object is dropped.
    """
    size, md5 = os.path.getsize(local), _md5_file(local)
    with translate_errors(url):
        fs.put_file(local, path)
    info = verify_upload(fs, path, url, size, md5)
    read_cache.forget(url, read_cache.endpoint_of(fs))
    return info


def verify_upload(fs: fsspec.AbstractFileSystem, path: str, url: str, size: int, md5: str | None) -> dict[str, Any]:
    """The stored object's info after checking its size, and its ETag when it is a plain MD5.

    A multipart upload's ETag (``"<hex>-<parts>"``) is not an MD5, so only the size counts
    there. ``PBG_VERIFY_ETAG=0`` turns the ETag check off for stores whose ETags are not MD5s
    (S3 with SSE-KMS encryption).
    """
    with translate_errors(url):
        info: dict[str, Any] = fs.info(path)
    etag = str(info.get("ETag") or "").strip('"')
    check_etag = md5 is not None and etag and "-" not in etag and os.environ.get("PBG_VERIFY_ETAG", "1") != "0"
    if info.get("size") != size or (check_etag and etag != md5):
        raise TransientStorageError(
            url,
            f"upload verification failed: stored {info.get('size')} bytes with ETag {etag or '(none)'}, "
            f"expected {size} bytes" + (f" with MD5 {md5}" if check_etag else ""),
        )
    return info


def _md5_file(local: str) -> str:
    digest = hashlib.md5()
    with open(local, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["upload_file", "verify_upload"]
