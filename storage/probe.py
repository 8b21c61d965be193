"""Start-of-run reachability check of object stores: a wrong endpoint fails in a second.

Inside a run, a refused connection to a remote endpoint is worth retrying (the store may be
restarting), so the storage layer marks it transient and botocore plus the task retries spend
about a minute on it (a refused *loopback* endpoint fails at once anyway, see
:mod:`storage.fail_fast`). Before any work that minute only delays the obvious: the check below makes
one request per bucket with a single attempt and short timeouts, and raises
:class:`StorageUnreachable` naming the URL and the endpoint (never a credential).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import fsspec
from fsspec.utils import infer_storage_options

from storage.errors import StorageError, StorageUnreachable, TransientStorageError
from storage.fs.urls import is_local, resolve, translate_errors

PROBE_CONFIG = {"retries": {"max_attempts": 1, "mode": "standard"}, "connect_timeout": 5, "read_timeout": 15}
_S3 = frozenset({"s3", "s3a"})


def check_reachable(urls: Iterable[str], storage_options: dict[str, Any] | None = None) -> list[str]:
    """Probe the bucket of every ``s3://`` URL once (local paths are skipped).

    Returns:
        The URLs probed (one per bucket).

    Raises:
        StorageUnreachable: no connection to the endpoint (refused, timed out, DNS).
        AccessDenied: missing, invalid or refused credentials.
        BadUrlError: a malformed ``s3://`` URL.
    """
    probed: list[str] = []
    seen: set[str] = set()
    for url in urls:
        parts = infer_storage_options(url)
        if parts.get("protocol") not in _S3:
            continue
        bucket = parts.get("host") or ""
        if bucket in seen:
            continue
        seen.add(bucket)
        _probe(url, dict(storage_options or {}))
        probed.append(url)
    return probed


def _probe(url: str, options: dict[str, Any]) -> None:
    config = {**(options.get("config_kwargs") or {}), **PROBE_CONFIG}
    fs, path = resolve(url, {**options, "config_kwargs": config, "skip_instance_cache": True})
    try:
        with translate_errors(url):
            try:
                fs.info(path)
            except FileNotFoundError:
                pass  # the endpoint answered: the bucket or key is simply not there (yet)
    except (TransientStorageError, StorageUnreachable) as err:  # the latter: refused on a loopback address
        raise StorageUnreachable(
            url,
            f"cannot reach the S3 endpoint {endpoint_of(fs)} ({_reason(err)}); check "
            "storage_options.endpoint_url / AWS_ENDPOINT_URL and that the server is up",
        ) from err


def endpoint_of(fs: fsspec.AbstractFileSystem) -> str:
    """The endpoint an s3fs filesystem talks to, for messages."""
    kwargs = getattr(fs, "client_kwargs", None) or {}
    return str(
        getattr(fs, "endpoint_url", None)
        or kwargs.get("endpoint_url")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or "AWS S3 (default endpoint)"
    )


def _reason(err: StorageError) -> str:
    cause = err.__cause__
    return f"{type(cause).__name__}: {cause}" if cause is not None else err.problem


def largest_local_bucket(edge_paths: Iterable[str]) -> int | None:
    """Edges in the largest bucket of the local ``edge_paths``; None if any is remote or unreadable.

    A hint for deciding how many HOGWILD workers to start ahead, never an error: whatever is
    wrong with the files is reported by the run's own checks. Reads only the HDF5 metadata.
    """
    from storage import hdf5, layout  # h5py only when asked (pbg import never is)

    largest = 0
    for edge_path in edge_paths:
        fs, path = resolve(edge_path)
        if not is_local(fs):
            return None
        try:
            names = [name for name in os.listdir(path) if layout.parse_edge_file(name) is not None]
            for name in names:
                url = os.path.join(path, name)
                with hdf5.open_read(url) as hf:
                    largest = max(largest, len(hdf5.require_dataset(hf, "rel", url)))
        except Exception:  # noqa: BLE001 - a hint only; the run's checks name the problem
            return None
    return largest
