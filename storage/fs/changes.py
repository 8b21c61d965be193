"""Changes: creating directories, deleting, copying and moving files.

Deletes drop the read-cache entries of their URL (:mod:`storage.read_cache`). Copies are atomic
(a server-side copy within one object store, a verified upload, or :func:`storage.fs.atomic.local_write`).
Object stores have no directories, so the directory operations do nothing there.
"""

from __future__ import annotations

import contextlib
import os
import shutil

from storage import read_cache
from storage.errors import DataNotFound
from storage.fs.atomic import local_write
from storage.fs.reads import local_read_path
from storage.fs.uploads import upload_file, verify_upload
from storage.fs.urls import StorageOptions, is_local, is_object_store, resolve, translate_errors


def makedirs(url: str, storage_options: StorageOptions = None) -> None:
    """Create the directory ``url`` and its parents (no-op if it exists, and on object stores).

    Object stores have no directories; s3fs's ``makedirs`` would create a missing *bucket*,
    turning a mistyped bucket name into a new bucket instead of an error.
    """
    fs, path = resolve(url, storage_options)
    if is_object_store(fs):
        return
    with translate_errors(url):
        fs.makedirs(path, exist_ok=True)


def remove(url: str, missing_ok: bool = True, storage_options: StorageOptions = None) -> None:
    """Delete the file at ``url`` (and its read-cache entries).

    Raises:
        DataNotFound: ``url`` does not exist and ``missing_ok`` is False.
    """
    fs, path = resolve(url, storage_options)
    with translate_errors(url):
        # S3 deletes are idempotent and never report a missing key: check first when it matters.
        if not missing_ok and not is_local(fs) and not fs.isfile(path):
            raise DataNotFound(url, "cannot remove: file does not exist")
        try:
            fs.rm_file(path)
        except (FileNotFoundError, NotADirectoryError):  # a path through a file cannot exist either
            if not missing_ok:
                raise DataNotFound(url, "cannot remove: file does not exist") from None
    if not is_local(fs):
        read_cache.forget(url, read_cache.endpoint_of(fs))


def remove_tree(url: str, storage_options: StorageOptions = None) -> None:
    """Delete the directory ``url`` and everything below it (no-op if absent)."""
    fs, path = resolve(url, storage_options)
    with translate_errors(url):
        if fs.exists(path):
            fs.rm(path, recursive=True)


def remove_empty_dir(url: str, storage_options: StorageOptions = None) -> None:
    """Delete the directory ``url`` if it exists and is empty (object stores: nothing to do)."""
    fs, path = resolve(url, storage_options)
    if is_object_store(fs):
        return
    with translate_errors(url):
        if fs.isdir(path) and not fs.ls(path, detail=False):
            fs.rmdir(path)


def copy(src_url: str, dst_url: str, storage_options: StorageOptions = None) -> None:
    """Copy one file to ``dst_url`` as a real, independent copy, atomically.

    Within one remote store the copy is server-side (no download), then its size is checked.

    Raises:
        DataNotFound: ``src_url`` does not exist.
        TransientStorageError: the copy's size differs from the source's.
    """
    src_fs, src_path = resolve(src_url, storage_options)
    dst_fs, dst_path = resolve(dst_url, storage_options)
    if src_fs is dst_fs and not is_local(src_fs):
        with translate_errors(src_url):
            size = src_fs.info(src_path)["size"]
        with translate_errors(dst_url):
            src_fs.copy(src_path, dst_path)
        verify_upload(dst_fs, dst_path, dst_url, size, None)
        read_cache.forget(dst_url, read_cache.endpoint_of(dst_fs))
        return
    if is_local(src_fs) and not is_local(dst_fs):
        upload_file(src_path, dst_fs, dst_path, dst_url)  # the source is complete: no temporary copy
        return
    with local_read_path(src_url, storage_options) as src, local_write(dst_url, storage_options) as dst:
        shutil.copyfile(src, dst)


def share(src_url: str, dst_url: str, storage_options: StorageOptions = None) -> None:
    """Make ``dst_url`` hold ``src_url``'s bytes without writing them again where possible.

    For a write-once file (every file of a checkpoint is written to a temporary name and
    renamed, never changed in place): on a local filesystem a hard link to it under a
    temporary name, renamed onto ``dst_url`` (atomic; no byte written, and deleting the source
    later leaves ``dst_url`` whole); elsewhere, or where linking fails (another filesystem, a
    filesystem without hard links), :func:`copy`.
    """
    src_fs, src_path = resolve(src_url, storage_options)
    dst_fs, dst_path = resolve(dst_url, storage_options)
    if is_local(src_fs) and is_local(dst_fs):
        temporary = f"{dst_path}.link-{os.getpid()}"
        try:
            os.link(src_path, temporary)
            os.replace(temporary, dst_path)
            return
        except FileNotFoundError:
            raise DataNotFound(src_url, "cannot link: file does not exist") from None
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    copy(src_url, dst_url, storage_options)


def same_stored_object(src_url: str, dst_url: str, storage_options: StorageOptions = None) -> bool:
    """Whether ``dst_url`` already holds exactly ``src_url``'s bytes, per the object store's ETag.

    Lets a retried copy skip what an earlier attempt finished. Only remote objects with
    equal, non-empty ETags and sizes count; local files and missing objects give False.
    """
    src_fs, src_path = resolve(src_url, storage_options)
    dst_fs, dst_path = resolve(dst_url, storage_options)
    if is_local(src_fs) or is_local(dst_fs):
        return False
    try:
        with translate_errors(dst_url):
            dst_info = dst_fs.info(dst_path)
        with translate_errors(src_url):
            src_info = src_fs.info(src_path)
    except FileNotFoundError:
        return False
    etag = str(dst_info.get("ETag") or "").strip('"')
    return (
        bool(etag)
        and etag == str(src_info.get("ETag") or "").strip('"')
        and dst_info.get("size") == src_info.get("size")
    )


def move(src_url: str, dst_url: str, storage_options: StorageOptions = None) -> None:
    """Move one file: a rename on local disk, copy then delete on an object store.

    Raises:
        DataNotFound: ``src_url`` does not exist.
    """
    src_fs, src_path = resolve(src_url, storage_options)
    if is_local(src_fs):
        dst_path = resolve(dst_url, storage_options)[1]
        with translate_errors(src_url):
            os.makedirs(os.path.dirname(dst_path) or "/", exist_ok=True)
            src_fs.mv(src_path, dst_path)
        return
    copy(src_url, dst_url, storage_options)
    remove(src_url, storage_options=storage_options)


__all__ = ["copy", "makedirs", "move", "remove", "remove_empty_dir", "remove_tree", "same_stored_object"]
