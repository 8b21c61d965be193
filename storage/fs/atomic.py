"""Atomic, durable writes: data goes to a temporary name and only a clean finish makes it visible.

On a local disk that is "tmp file in the same directory, fsync, rename, fsync the directory", so a
crash leaves either the old file or the new one, never a torn one. On an object store the data is
written to a local file and uploaded in one ``put`` (:mod:`storage.fs.uploads`, verified); the
uploaded file enters the read cache of :mod:`storage.read_cache` for free.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import uuid
from collections.abc import Iterator

from storage import layout, read_cache
from storage.errors import AccessDenied, BadUrlError
from storage.fs.uploads import upload_file, verify_upload
from storage.fs.urls import StorageOptions, is_local, resolve, translate_errors
from storage.layout import tmp_file

logger = logging.getLogger(__name__)


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

    Raises:
        AccessDenied: the local directory cannot be created or written.
        BadUrlError: part of the local directory's path is a file.
        TransientStorageError: the upload failed or did not verify (remote only).
    """
    fs, path = resolve(url, storage_options)
    if is_local(fs):
        directory, _, name = path.rpartition("/")
        directory = directory or "/"
        try:
            with translate_errors(url):  # an unwritable parent: AccessDenied naming the URL
                os.makedirs(directory, exist_ok=True)
        except (NotADirectoryError, FileExistsError):
            raise BadUrlError(url, f"cannot create directory {directory}: part of that path is a file") from None
        if not os.access(directory, os.W_OK | os.X_OK):
            raise AccessDenied(url, f"cannot write into directory {directory} (permission denied)")
        tmp = os.path.join(directory, tmp_name or tmp_file(name))
        _remove_if_exists(tmp)
        try:
            yield tmp
            _commit_local(tmp, path)
        except BaseException:
            # Also an interrupt during the commit's fsync: the rename did not happen (else there
            # is no tmp left), so the previous file stands and nothing of this write remains.
            _remove_if_exists(tmp)
            raise
        return
    # Inside the cache directory so that the verified upload can be renamed into the cache.
    with tempfile.TemporaryDirectory(prefix=".write-", dir=read_cache.cache_dir()) as tmp_dir:
        local = os.path.join(tmp_dir, path.rpartition("/")[2] or "data")
        yield local
        info = upload_file(local, fs, path, url)
        version = read_cache.version_of(info)
        if version is not None:
            read_cache.adopt(url, read_cache.endpoint_of(fs), version, local)


def write_text_atomic(url: str, text: str, storage_options: StorageOptions = None) -> None:
    """Replace the file at ``url`` with ``text`` (UTF-8) atomically and durably.

    Local disk: tmp + fsync + rename. Remote: one PUT (atomic on object stores), verified.
    """
    fs, path = resolve(url, storage_options)
    if is_local(fs):
        with local_write(url, storage_options) as local_path, open(local_path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    data = text.encode("utf-8")
    with translate_errors(url):
        fs.pipe_file(path, data)
    verify_upload(fs, path, url, len(data), hashlib.md5(data).hexdigest())
    read_cache.forget(url, read_cache.endpoint_of(fs))


def create_exclusive(url: str, text: str, storage_options: StorageOptions = None) -> bool:
    """Create the file ``url`` with ``text`` only if nothing is there; whether it was created.

    Atomic and exclusive: of two concurrent callers exactly one gets True, and a reader never
    sees a partial file. Locally: a complete temporary file hard-linked to the final name
    (``link`` fails if the name exists), then fsync of the directory. On S3: one conditional
    PUT (``If-None-Match: *``).
    """
    fs, path = resolve(url, storage_options)
    data = text.encode("utf-8")
    if not is_local(fs):
        try:
            with translate_errors(url):
                fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
        return True
    directory = os.path.dirname(path) or "/"
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, layout.atomic_tmp_file(os.path.basename(path), uuid.uuid4().hex[:12]))
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with translate_errors(url):
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
    finally:
        _remove_if_exists(tmp)
    _fsync_dir(directory)
    return True


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
    _fsync_dir(os.path.dirname(final) or "/")
    logger.debug("committed %s", final)


def _fsync_dir(directory: str) -> None:
    """Make a rename or link in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


__all__ = ["create_exclusive", "local_write", "write_text_atomic"]
