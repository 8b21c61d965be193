"""The one place that turns URLs into (fsspec filesystem, path) and does file I/O on them.

Stores take URLs (plain local paths, ``file://`` or ``s3://`` URLs) and call the functions
here; nothing else in the package looks at paths or calls ``os``.

Writes are atomic: data goes to a temporary name and only a clean finish makes it
visible under the final name. On a local disk that is "tmp file in the same
directory, fsync, rename, fsync the directory", so a crash leaves either the old
file or the new one, never a torn one. On an object store the data is written to a
local file and uploaded in one ``put`` (an object appears only when its upload
completes, multipart included), then verified: the stored size, and the ETag against the
MD5 of a single-part upload, must match, else :class:`TransientStorageError` (retryable).

Reads of whole files from a remote store go through the local read cache of
:mod:`storage.read_cache`: :func:`local_read_path` downloads once, keyed by URL and endpoint
and validated by the object's ETag and size, so edge files re-read every epoch cost a HEAD
request, not a download. Files just uploaded by :func:`local_write` enter the cache for
free; writes and deletes here drop the cached versions of their URL. Local files never go
through the cache.

Errors: every entry point runs its filesystem calls inside :func:`translate_errors`, which
maps what s3fs / botocore / aiohttp / the OS raise onto :mod:`storage.errors` naming the URL.

S3 listings are never cached (``use_listings_cache=False``): a resumed run, another process
or another store object must see objects written since, and a stale listing could hide a
checkpoint version. Listings are small and rare next to data transfers, so it costs little;
filesystem *instances* stay cached (fsspec's default) because building one creates an HTTP
session and resolves credentials.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec
from fsspec.core import split_protocol, url_to_fs

from storage import fail_fast, read_cache
from storage.errors import (
    AccessDenied,
    BadDataError,
    BadUrlError,
    DataNotFound,
    StorageError,
    TransientStorageError,
    translate,
)
from storage.layout import tmp_file
from storage.read_cache import cache_dir  # re-exported: other stores keep files next to the cache

logger = logging.getLogger(__name__)

StorageOptions = Mapping[str, Any] | None

_S3_PROTOCOLS = frozenset({"s3", "s3a"})
# Stores without directories: "mkdir" would mean "create a bucket" there.
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az", "adl"})
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_S3_URL_HELP = "expected s3://<bucket>/<key>, bucket 3-63 characters of lowercase letters, digits, '.' and '-'"


@contextlib.contextmanager
def translate_errors(url: str) -> Iterator[None]:
    """Re-raise what a filesystem call raises as the :mod:`storage.errors` type it stands for.

    Missing object or bucket -> ``DataNotFound``; denied, invalid or missing credentials ->
    ``AccessDenied``; rejected bucket name -> ``BadUrlError``; connection refused/reset,
    timeouts, HTTP 5xx, throttling -> ``TransientStorageError``. Anything else passes unchanged.
    """
    try:
        yield
    except StorageError:
        raise
    except Exception as err:
        translated = translate(err, url)
        if translated is None:
            raise
        raise translated from err


def resolve(url: str, storage_options: StorageOptions = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """Resolve ``url`` into its filesystem and the path within it.

    Args:
        url: A local path, ``file://`` URL, ``s3://bucket/key`` or any fsspec URL.
        storage_options: Keyword arguments for the filesystem (credentials, endpoint).

    Returns:
        (filesystem, path). Local paths come back absolute.

    Raises:
        BadUrlError: an ``s3://`` URL without a valid bucket name.
    """
    options = dict(storage_options or {})
    protocol = split_protocol(url)[0]
    if protocol in _S3_PROTOCOLS:
        _check_s3_url(url)
        options = _s3_options(options)
    with translate_errors(url):
        filesystem, path = url_to_fs(url, **options)
    if protocol in _S3_PROTOCOLS:
        fail_fast.install(filesystem)
    return filesystem, path


def _check_s3_url(url: str) -> None:
    bucket = split_protocol(url)[1].partition("/")[0]  # "s3:///key" has an empty bucket
    if not bucket:
        raise BadUrlError(url, f"no bucket name; {_S3_URL_HELP}")
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise BadUrlError(url, f"invalid bucket name {bucket!r}; {_S3_URL_HELP}")


def _s3_options(options: dict[str, Any]) -> dict[str, Any]:
    """s3fs defaults: no listings cache (see module docstring) and the endpoint from the env.

    botocore reads ``AWS_ENDPOINT_URL`` itself, but fsspec caches filesystem instances by
    their keyword arguments: passing the endpoint explicitly makes a changed endpoint a new
    instance instead of a cached client still talking to the old one.
    """
    options.setdefault("use_listings_cache", False)
    client_kwargs = options.get("client_kwargs") or {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_url" not in options and "endpoint_url" not in client_kwargs:
        options["endpoint_url"] = endpoint
    return options


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is the local disk (so h5py can open its paths directly)."""
    return bool(_protocols(fs) & {"file", "local"})


def _protocols(fs: fsspec.AbstractFileSystem) -> set[str]:
    return set(fs.protocol) if isinstance(fs.protocol, (tuple, list)) else {fs.protocol}


def _is_object_store(fs: fsspec.AbstractFileSystem) -> bool:
    return bool(_protocols(fs) & _OBJECT_STORES)


def join_url(base: str, *parts: str) -> str:
    """Join ``parts`` onto ``base`` with ``/``, keeping any scheme of ``base``.

    ``join_url("s3://b/ckpt", "epoch_5", "model.v5.h5") == "s3://b/ckpt/epoch_5/model.v5.h5"``.
    """
    cleaned = [p.strip("/") for p in parts if p.strip("/")]
    return "/".join([base.rstrip("/") or "", *cleaned]) if cleaned else base


def exists(url: str, storage_options: StorageOptions = None) -> bool:
    """Whether a file or directory exists at ``url``."""
    fs, path = resolve(url, storage_options)
    with translate_errors(url):
        return bool(fs.exists(path))


def isdir(url: str, storage_options: StorageOptions = None) -> bool:
    """Whether ``url`` is a directory (on an object store: a prefix with objects under it)."""
    fs, path = resolve(url, storage_options)
    with translate_errors(url):
        return bool(fs.isdir(path))


def makedirs(url: str, storage_options: StorageOptions = None) -> None:
    """Create the directory ``url`` and its parents (no-op if it exists, and on object stores).

    Object stores have no directories; s3fs's ``makedirs`` would create a missing *bucket*,
    turning a mistyped bucket name into a new bucket instead of an error.
    """
    fs, path = resolve(url, storage_options)
    if _is_object_store(fs):
        return
    with translate_errors(url):
        fs.makedirs(path, exist_ok=True)


def listdir(url: str, storage_options: StorageOptions = None) -> list[str]:
    """Sorted base names of the entries of directory ``url`` ([] if it does not exist)."""
    fs, path = resolve(url, storage_options)
    with translate_errors(url):
        if is_local(fs) and not fs.isdir(path):
            return []
        try:
            entries = fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
    names = {str(e).rstrip("/").rpartition("/")[2] for e in entries if str(e).rstrip("/") != path.rstrip("/")}
    return sorted(names)


def read_bytes(url: str, storage_options: StorageOptions = None) -> bytes:
    """The whole content of ``url``.

    Raises:
        DataNotFound: ``url`` does not exist.
    """
    fs, path = resolve(url, storage_options)
    try:
        with translate_errors(url):
            return bytes(fs.cat_file(path))
    except IsADirectoryError:
        raise DataNotFound(url, "is a directory, expected a file") from None


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
    _verify_upload(fs, path, url, len(data), hashlib.md5(data).hexdigest())
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
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
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
    if _is_object_store(fs):
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
        _verify_upload(dst_fs, dst_path, dst_url, size, None)
        read_cache.forget(dst_url, read_cache.endpoint_of(dst_fs))
        return
    if is_local(src_fs) and not is_local(dst_fs):
        _upload_file(src_path, dst_fs, dst_path, dst_url)  # the source is complete: no temporary copy
        return
    with local_read_path(src_url, storage_options) as src, local_write(dst_url, storage_options) as dst:
        shutil.copyfile(src, dst)


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


@contextlib.contextmanager
def local_read_path(url: str, storage_options: StorageOptions = None) -> Iterator[str]:
    """A local path holding the content of ``url`` for the duration of the block.

    The path itself on local disk; a read-cache entry for remote stores that give an ETag
    (see :mod:`storage.read_cache`); a temporary download otherwise.

    Raises:
        DataNotFound: ``url`` does not exist.
    """
    fs, path = resolve(url, storage_options)
    if is_local(fs):
        if os.path.isdir(path):
            raise DataNotFound(url, "is a directory, expected a file")
        if not os.path.isfile(path):
            raise DataNotFound(url, "file does not exist")
        yield path
        return
    with translate_errors(url):
        info = fs.info(path)
    if info.get("type") == "directory":
        raise DataNotFound(url, "is a directory, expected a file")
    version = read_cache.version_of(info)

    def download(local: str) -> None:
        with translate_errors(url):
            fs.get_file(path, local)
        got = os.path.getsize(local)
        if got != info["size"]:
            raise TransientStorageError(url, f"download has {got} bytes, expected {info['size']}")

    if version is None:
        with tempfile.TemporaryDirectory(prefix="pbg-read-") as tmp_dir:
            local = os.path.join(tmp_dir, path.rpartition("/")[2] or "data")
            download(local)
            yield local
        return
    with read_cache.open_entry(url, read_cache.endpoint_of(fs), version, download) as local:
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
        except BaseException:
            _remove_if_exists(tmp)
            raise
        _commit_local(tmp, path)
        return
    # Inside the cache directory so that the verified upload can be renamed into the cache.
    with tempfile.TemporaryDirectory(prefix=".write-", dir=read_cache.cache_dir()) as tmp_dir:
        local = os.path.join(tmp_dir, path.rpartition("/")[2] or "data")
        yield local
        info = _upload_file(local, fs, path, url)
        version = read_cache.version_of(info)
        if version is not None:
            read_cache.adopt(url, read_cache.endpoint_of(fs), version, local)


def _upload_file(local: str, fs: fsspec.AbstractFileSystem, path: str, url: str) -> dict[str, Any]:
    """Upload a complete local file to ``path`` of a remote ``fs``, verified; its stored info.

    One PUT, or a multipart upload that publishes on completion: never a partial object.
    Any cached copy of the old object is dropped.
    """
    size, md5 = os.path.getsize(local), _md5_file(local)
    with translate_errors(url):
        fs.put_file(local, path)
    info = _verify_upload(fs, path, url, size, md5)
    read_cache.forget(url, read_cache.endpoint_of(fs))
    return info


def _verify_upload(fs: fsspec.AbstractFileSystem, path: str, url: str, size: int, md5: str | None) -> dict[str, Any]:
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


__all__ = [
    "StorageOptions",
    "cache_dir",
    "copy",
    "create_exclusive",
    "exists",
    "is_local",
    "isdir",
    "join_url",
    "listdir",
    "local_read_path",
    "local_write",
    "makedirs",
    "move",
    "read_bytes",
    "read_text",
    "remove",
    "remove_empty_dir",
    "remove_tree",
    "resolve",
    "translate_errors",
    "write_text_atomic",
]
