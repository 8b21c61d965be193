"""The one place that turns URLs into (fsspec filesystem, path) and does file I/O on them.

Stores take URLs (plain local paths, ``file://`` URLs, later ``s3://``) and call the
functions here; nothing else in the package looks at paths or calls ``os``.

Writes are atomic: data goes to a temporary name and only a clean finish makes it
visible under the final name. On a local disk that is "tmp file in the same
directory, fsync, rename, fsync the directory", so a crash leaves either the old
file or the new one, never a torn one. On a remote filesystem the data is written
to a local temporary file and uploaded in one ``put`` (object stores publish an
object atomically), and reads of HDF5 files download to a local temporary copy,
because h5py needs a real file. :func:`local_write` and :func:`local_read_path`
hide that difference: on local disk they are (almost) the identity.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec
from fsspec.core import url_to_fs

from storage.errors import BadDataError, DataNotFound
from storage.layout import tmp_file

logger = logging.getLogger(__name__)

StorageOptions = Mapping[str, Any] | None


def resolve(url: str, storage_options: StorageOptions = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """Resolve ``url`` into its filesystem and the path within it.

    Args:
        url: A local path, ``file://`` URL or any fsspec URL.
        storage_options: Keyword arguments for the filesystem (credentials, endpoint).

    Returns:
        (filesystem, path). Local paths come back absolute.
    """
    return url_to_fs(url, **dict(storage_options or {}))


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is the local disk (so h5py can open its paths directly)."""
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocols or "local" in protocols


def join_url(base: str, *parts: str) -> str:
    """Join ``parts`` onto ``base`` with ``/``, keeping any scheme of ``base``.

    ``join_url("s3://b/ckpt", "epoch_5", "model.v5.h5") == "s3://b/ckpt/epoch_5/model.v5.h5"``.
    """
    cleaned = [p.strip("/") for p in parts if p.strip("/")]
    return "/".join([base.rstrip("/") or "", *cleaned]) if cleaned else base


def exists(url: str, storage_options: StorageOptions = None) -> bool:
    """Whether a file or directory exists at ``url``."""
    fs, path = resolve(url, storage_options)
    return bool(fs.exists(path))


def makedirs(url: str, storage_options: StorageOptions = None) -> None:
    """Create the directory ``url`` and its parents (no-op if it exists)."""
    fs, path = resolve(url, storage_options)
    fs.makedirs(path, exist_ok=True)


def listdir(url: str, storage_options: StorageOptions = None) -> list[str]:
    """Sorted base names of the entries of directory ``url`` ([] if it does not exist)."""
    fs, path = resolve(url, storage_options)
    if not fs.isdir(path):
        return []
    entries = fs.ls(path, detail=False)
    return sorted({str(e).rstrip("/").rpartition("/")[2] for e in entries})


def read_bytes(url: str, storage_options: StorageOptions = None) -> bytes:
    """The whole content of ``url``.

    Raises:
        DataNotFound: ``url`` does not exist.
    """
    fs, path = resolve(url, storage_options)
    try:
        return bytes(fs.cat_file(path))
    except (FileNotFoundError, IsADirectoryError):
        raise DataNotFound(url, "file does not exist") from None


def read_text(url: str, storage_options: StorageOptions = None) -> str:
    """The content of ``url`` decoded as UTF-8.

    Raises:
        DataNotFound: ``url`` does not exist.
        BadDataError: the content is not UTF-8.
    """
    data = read_bytes(url, storage_options)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadDataError(url, f"expected UTF-8 text, got undecodable byte at offset {err.start}") from None


def write_text_atomic(url: str, text: str, storage_options: StorageOptions = None) -> None:
    """Replace the file at ``url`` with ``text`` (UTF-8) atomically and durably."""
    with local_write(url, storage_options) as local_path:
        with open(local_path, "w", encoding="utf-8") as f:
            f.write(text)


def remove(url: str, missing_ok: bool = True, storage_options: StorageOptions = None) -> None:
    """Delete the file at ``url``.

    Raises:
        DataNotFound: ``url`` does not exist and ``missing_ok`` is False.
    """
    fs, path = resolve(url, storage_options)
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        if not missing_ok:
            raise DataNotFound(url, "cannot remove: file does not exist") from None


def copy(src_url: str, dst_url: str, storage_options: StorageOptions = None) -> None:
    """Copy one file to ``dst_url`` as a real, independent copy, atomically.

    Raises:
        DataNotFound: ``src_url`` does not exist.
    """
    with local_read_path(src_url, storage_options) as src, local_write(dst_url, storage_options) as dst:
        shutil.copyfile(src, dst)


@contextlib.contextmanager
def local_read_path(url: str, storage_options: StorageOptions = None) -> Iterator[str]:
    """A local path holding the content of ``url`` for the duration of the block.

    The path itself on local disk; a temporary download otherwise.

    Raises:
        DataNotFound: ``url`` does not exist.
    """
    fs, path = resolve(url, storage_options)
    if is_local(fs):
        if not os.path.isfile(path):
            raise DataNotFound(url, "file does not exist")
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="pbg-read-") as tmp_dir:
        local = os.path.join(tmp_dir, path.rpartition("/")[2] or "data")
        try:
            fs.get_file(path, local)
        except FileNotFoundError:
            raise DataNotFound(url, "file does not exist") from None
        yield local


@contextlib.contextmanager
def local_write(url: str, storage_options: StorageOptions = None, tmp_name: str | None = None) -> Iterator[str]:
    """A local path to write; on a clean exit its content becomes ``url`` atomically.

    If the block raises, nothing appears at ``url`` (a previous file there is kept)
    and the temporary file is deleted.

    Args:
        url: The final destination; its parent directory is created if needed.
        storage_options: Filesystem keyword arguments.
        tmp_name: Base name of the temporary file on local disk (default: ``.tmp``
            inserted before the extension, see :func:`storage.layout.tmp_file`).
            A stale file of that name is deleted first.
    """
    fs, path = resolve(url, storage_options)
    if is_local(fs):
        directory, _, name = path.rpartition("/")
        directory = directory or "/"
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, tmp_name or tmp_file(name))
        _remove_if_exists(tmp)
        try:
            yield tmp
        except BaseException:
            _remove_if_exists(tmp)
            raise
        _commit_local(tmp, path)
        return
    with tempfile.TemporaryDirectory(prefix="pbg-write-") as tmp_dir:
        local = os.path.join(tmp_dir, path.rpartition("/")[2] or "data")
        yield local
        # One PUT publishes the whole object: readers never see a partial upload.
        fs.put_file(local, path)


def _remove_if_exists(local_path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(local_path)


def _commit_local(tmp: str, final: str) -> None:
    """fsync ``tmp``, rename it over ``final``, then fsync the directory so the rename is durable."""
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    dir_fd = os.open(os.path.dirname(final) or "/", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    logger.debug("committed %s", final)
