"""Tests for storage.fs.uploads: an upload is verified against the stored size and MD5 (moto S3 server)."""

from __future__ import annotations

import hashlib

import pytest

from storage.errors import (
    TransientStorageError,
)
from storage.fs import atomic, uploads, urls


def test_upload_is_verified_against_size_and_md5(base: str) -> None:
    url = urls.join_url(base, "x.bin")
    data = b"payload to verify"
    atomic.write_text_atomic(url, data.decode())
    filesystem, path = urls.resolve(url)
    info = filesystem.info(path)
    assert info["ETag"].strip('"') == hashlib.md5(data).hexdigest() and info["size"] == len(data)
    # What a torn or foreign object looks like to the check: retryable, names both sides.
    with pytest.raises(TransientStorageError, match=r"stored 17 bytes .* expected 18 bytes"):
        uploads.verify_upload(filesystem, path, url, len(data) + 1, None)
    with pytest.raises(TransientStorageError, match="expected 17 bytes with MD5 0123"):
        uploads.verify_upload(filesystem, path, url, len(data), "0123" + "0" * 28)
    assert uploads.verify_upload(filesystem, path, url, len(data), hashlib.md5(data).hexdigest())["size"] == 17
