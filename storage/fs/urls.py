"""URLs: resolving one into its fsspec filesystem and path, S3 client options, error translation.

Every entry point of :mod:`storage.fs` resolves its URL here and runs its filesystem calls
inside :func:`translate_errors`, which maps what s3fs / botocore / aiohttp / the OS raise onto
:mod:`storage.errors` naming the URL. S3 URLs are checked (bucket name) before any request, and
s3fs gets no listings cache (see :mod:`storage.fs`) and the endpoint from the environment.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec
from fsspec.core import split_protocol, url_to_fs

from storage import fail_fast
from storage.errors import BadUrlError, StorageError, translate

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
    """s3fs defaults: no listings cache (see :mod:`storage.fs`) and the endpoint from the env.

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


def is_object_store(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is an object store (no directories: S3, GCS, Azure)."""
    return bool(_protocols(fs) & _OBJECT_STORES)


def join_url(base: str, *parts: str) -> str:
    """Join ``parts`` onto ``base`` with ``/``, keeping any scheme of ``base``.

    ``join_url("s3://b/ckpt", "epoch_5", "model.v5.h5") == "s3://b/ckpt/epoch_5/model.v5.h5"``.
    """
    cleaned = [p.strip("/") for p in parts if p.strip("/")]
    return "/".join([base.rstrip("/") or "", *cleaned]) if cleaned else base


__all__ = ["StorageOptions", "is_local", "is_object_store", "join_url", "resolve", "translate_errors"]
