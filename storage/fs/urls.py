"""URLs: resolving one into its fsspec filesystem and path, S3 client options, error translation.

Every entry point of :mod:`storage.fs` resolves its URL here and runs its filesystem calls
inside :func:`translate_errors`, which maps what s3fs / botocore / aiohttp / the OS raise onto
:mod:`storage.errors` naming the URL. S3 URLs are checked (bucket name) before any request, and
s3fs gets no listings cache (see :mod:`storage.fs`) and the endpoint from the environment.

A URL whose scheme has no filesystem that loads here (an unknown scheme, ``gs://`` without
gcsfs, ``hdfs://`` without Hadoop's native client) is refused as
:class:`~storage.errors.FilesystemUnavailable` naming the scheme and what is missing:
:func:`check_filesystems` does it for a command's named URLs before any work (the message names
the config field or option), and :func:`resolve` for any other URL.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import fsspec
from fsspec.core import split_protocol, url_to_fs
from fsspec.registry import known_implementations

from storage import fail_fast
from storage.errors import BadUrlError, FilesystemUnavailable, StorageError, translate

StorageOptions = Mapping[str, Any] | None

_S3_PROTOCOLS = frozenset({"s3", "s3a"})
# Stores without directories: "mkdir" would mean "create a bucket" there.
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "az", "adl"})
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_S3_URL_HELP = "expected s3://<bucket>/<key>, bucket 3-63 characters of lowercase letters, digits, '.' and '-'"
_LOCAL_PROTOCOLS = frozenset({"file", "local"})
_KNOWN_SCHEMES_HELP = "give a local path or a URL of a scheme fsspec knows (file://, s3://, gs://, az://, hdfs://, ...)"
_HDFS_CLASS = "fsspec.implementations.arrow.HadoopFileSystem"


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
        FilesystemUnavailable: no filesystem of ``url``'s scheme loads here (see :func:`filesystem_problem`).
    """
    problem = filesystem_problem(url)
    if problem is not None:
        raise FilesystemUnavailable(url, problem)
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


def check_filesystems(named_urls: Iterable[tuple[str, str]]) -> None:
    """Refuse the first URL whose filesystem cannot load here, naming its field; before any work.

    Args:
        named_urls: (field, URL) pairs, the field as the user wrote it (``checkpoint_path``,
            ``edge_paths[1]``, ``--config-url``, ``input 2``).

    Raises:
        FilesystemUnavailable: ``"<url>: <field>'s URL scheme 'hdfs://' cannot be used here:
            <what is missing>"``.
    """
    for field, url in named_urls:
        problem = filesystem_problem(url, field)
        if problem is not None:
            raise FilesystemUnavailable(url, problem)


def filesystem_problem(url: str, field: str | None = None) -> str | None:
    """Why no filesystem of ``url``'s scheme can load here, naming ``field`` when given; None when one can.

    The filesystem's class is loaded (fsspec imports its package), nothing is connected to.
    Refused: an unknown scheme; a scheme whose package is missing (``gs://`` without gcsfs,
    ``az://`` without adlfs: the message names the package to install); ``hdfs://`` when pyarrow
    cannot load Hadoop's native client (libhdfs and a Java runtime). A chained URL
    (``simplecache::s3://...``) needs every filesystem of its chain.
    """
    for part in url.split("::"):
        protocol = split_protocol(part)[0]
        if protocol is None or protocol in _LOCAL_PROTOCOLS:
            continue
        why = _protocol_problem(protocol)
        if why is not None:
            subject = f"{field}'s URL scheme" if field else "the URL scheme"
            return f"{subject} '{protocol}://' {why}"
    return None


@functools.cache
def _protocol_problem(protocol: str) -> str | None:
    """What keeps ``protocol``'s filesystem from loading (the end of :func:`filesystem_problem`'s sentence)."""
    try:
        filesystem_class = fsspec.get_filesystem_class(protocol)
    except ValueError:  # fsspec: "Protocol not known"
        return f"is unknown: no filesystem is registered for it; {_KNOWN_SCHEMES_HELP}"
    except ImportError as err:
        registered = known_implementations.get(protocol, {}).get("class", "")
        module = getattr(err.__cause__, "name", None) or registered.split(".")[0] or "?"
        return (
            f"cannot be used here: the Python package {module!r} is not installed "
            f"(pip install {module}; fsspec says: {err})"
        )
    native = _NATIVE_CHECKS.get(f"{filesystem_class.__module__}.{filesystem_class.__qualname__}")
    missing = native() if native is not None else None
    return f"cannot be used here: {missing}" if missing else None


def _hdfs_native_problem() -> str | None:
    """What pyarrow's HDFS client lacks here (libhdfs and a Java runtime), or None when it loads."""
    import pyarrow

    if pyarrow.have_libhdfs():
        return None
    unset = [name for name in ("JAVA_HOME", "HADOOP_HOME") if not os.environ.get(name)]
    return (
        "pyarrow cannot load Hadoop's native client: it needs libjvm.so (a Java runtime, found through JAVA_HOME) "
        "and libhdfs.so (found through HADOOP_HOME, or ARROW_LIBHDFS_DIR naming its directory), with Hadoop's "
        "jars in CLASSPATH (`hadoop classpath --glob`)" + (f"; {' and '.join(unset)} not set" if unset else "")
    )


# Filesystems that need a native library besides their Python package, by class: what is missing.
_NATIVE_CHECKS: dict[str, Callable[[], str | None]] = {_HDFS_CLASS: _hdfs_native_problem}


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


__all__ = [
    "StorageOptions",
    "check_filesystems",
    "filesystem_problem",
    "is_local",
    "is_object_store",
    "join_url",
    "resolve",
    "translate_errors",
]
