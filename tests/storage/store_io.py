"""Test-side file access for any ``store_root`` URL (local directory or ``s3://``), bypassing storage.fs.

Tests plant and inspect files with these helpers so that the same test body checks the
same bytes on local disk and on the S3 server. They use fsspec directly (their own
filesystem instance, no listings cache), independent of the code under test.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import fsspec
import h5py
from fsspec.core import url_to_fs


def _fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    if url.startswith("s3://"):
        # Its own cached instance (other kwargs than storage.fs uses), never a cached listing.
        return url_to_fs(url, use_listings_cache=False, client_kwargs={"region_name": "us-east-1"})
    return url_to_fs(url)


def is_s3(url: str) -> bool:
    """Whether ``url`` is on the S3 server."""
    return url.startswith("s3://")


def join(base: str, *parts: str) -> str:
    """``base/part/...``."""
    return "/".join([base.rstrip("/"), *parts])


def put_bytes(url: str, data: bytes) -> None:
    """Create or overwrite the file at ``url``."""
    filesystem, path = _fs(url)
    if not is_s3(url):
        filesystem.makedirs(os.path.dirname(path), exist_ok=True)
    filesystem.pipe_file(path, data)


def put_text(url: str, text: str) -> None:
    """Create or overwrite the file at ``url`` with UTF-8 ``text``."""
    put_bytes(url, text.encode("utf-8"))


def get_bytes(url: str) -> bytes:
    """The content of the file at ``url``."""
    filesystem, path = _fs(url)
    return bytes(filesystem.cat_file(path))


def get_text(url: str) -> str:
    """The content of the file at ``url`` as UTF-8."""
    return get_bytes(url).decode("utf-8")


def exists(url: str) -> bool:
    """Whether a file (or, locally, a directory) exists at ``url``."""
    filesystem, path = _fs(url)
    return bool(filesystem.exists(path))


def names(url: str) -> list[str]:
    """Sorted base names directly under directory ``url`` (files and subdirectories)."""
    filesystem, path = _fs(url)
    if not filesystem.exists(path):
        return []
    return sorted(str(e).rstrip("/").rpartition("/")[2] for e in filesystem.ls(path, detail=False))


def all_files(url: str) -> list[str]:
    """Sorted paths of every file below ``url``, relative to it."""
    filesystem, path = _fs(url)
    if not filesystem.exists(path):
        return []
    return sorted(str(f)[len(path.rstrip("/")) + 1 :] for f in filesystem.find(path))


@contextlib.contextmanager
def write_h5(url: str) -> Iterator[h5py.File]:
    """An HDF5 file written locally and uploaded to ``url`` on exit (no format_version set)."""
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "f.h5")
        with h5py.File(local, "w") as hf:
            yield hf
        with open(local, "rb") as f:
            put_bytes(url, f.read())


@contextlib.contextmanager
def read_h5(url: str) -> Iterator[h5py.File]:
    """The HDF5 file at ``url``, opened read-only from a local download."""
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "f.h5")
        with open(local, "wb") as f:
            f.write(get_bytes(url))
        with h5py.File(local, "r") as hf:
            yield hf


def read_h5_datasets(url: str) -> dict[str, Any]:
    """Every dataset of the HDF5 file at ``url`` by name, as numpy arrays."""
    import numpy as np

    out: dict[str, Any] = {}
    with read_h5(url) as hf:
        hf.visititems(
            lambda name, obj: out.__setitem__(name, np.array(obj[()])) if isinstance(obj, h5py.Dataset) else None
        )
    return out


class StorePath:
    """A ``pathlib.Path``-like handle on a local or S3 URL, for test bodies shared by both.

    Supports what the storage tests do with ``tmp_path``: ``/``, ``str()``, ``name``,
    ``read/write_text``, ``read/write_bytes``, ``exists()``, ``iterdir()``, ``is_symlink()``.
    """

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def __truediv__(self, part: str) -> StorePath:
        return StorePath(join(self.url, part))

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"StorePath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StorePath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    @property
    def name(self) -> str:
        """The last component."""
        return self.url.rpartition("/")[2]

    @property
    def is_s3(self) -> bool:
        """Whether this is on the S3 server."""
        return is_s3(self.url)

    def write_bytes(self, data: bytes) -> None:
        put_bytes(self.url, data)

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        put_bytes(self.url, text.encode(encoding))

    def read_bytes(self) -> bytes:
        return get_bytes(self.url)

    def read_text(self, encoding: str = "utf-8") -> str:
        return get_bytes(self.url).decode(encoding)

    def exists(self) -> bool:
        return exists(self.url)

    def iterdir(self) -> list[StorePath]:
        return [self / name for name in names(self.url)]

    def is_symlink(self) -> bool:
        return not self.is_s3 and os.path.islink(self.url)

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        if not self.is_s3:
            os.makedirs(self.url, exist_ok=exist_ok)


def move_tree(src_url: str, dst_url: str) -> None:
    """Move every file below ``src_url`` to the same relative path below ``dst_url``."""
    for rel in all_files(src_url):
        put_bytes(join(dst_url, rel), get_bytes(join(src_url, rel)))
    filesystem, path = _fs(src_url)
    filesystem.rm(path, recursive=True)
