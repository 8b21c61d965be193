"""Reads: existence checks, directory listings and file contents.

:func:`read_json` is the one reader of a small JSON file (a pointer, a log, a names list): a
file that is not JSON gets the same one line from every format; the shape of the value is each
format's own check, made by its caller.

Reads of whole files from a remote store go through the local read cache of
:mod:`storage.read_cache`: :func:`local_read_path` downloads once, keyed by URL and endpoint and
validated by the object's ETag and size, so edge files re-read every epoch cost a HEAD request,
not a download. Local files never go through the cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any, NamedTuple

from storage import read_cache
from storage.errors import BadDataError, DataNotFound, TransientStorageError
from storage.fs.urls import StorageOptions, is_local, resolve, translate_errors


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


class JsonFile(NamedTuple):
    """A JSON file as read: the decoded value, and the text (for messages quoting what is there)."""

    data: Any
    text: str


def read_json(url: str, storage_options: StorageOptions = None) -> JsonFile:
    """The content of ``url`` decoded as JSON, with its text.

    Raises:
        DataNotFound: ``url`` does not exist (a caller for which that means "none yet" catches it).
        BadDataError: the content is not UTF-8, or not JSON (naming the line and column).
    """
    text = read_text(url, storage_options)
    try:
        return JsonFile(json.loads(text), text)
    except json.JSONDecodeError as err:
        raise BadDataError(url, f"invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None


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


__all__ = ["JsonFile", "exists", "isdir", "listdir", "local_read_path", "read_bytes", "read_json", "read_text"]
