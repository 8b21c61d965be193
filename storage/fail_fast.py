"""Which S3 connection failures retries cannot fix, and stopping botocore from retrying them.

A refused connection to a *loopback* endpoint (``127.0.0.1``, ``::1``, ``localhost``: a MinIO
or moto on this machine) means nothing listens on that port: the server is not started or the
port is wrong. Retrying it only delays the error (botocore's 5 attempts with back-off, ~8 s
per request, then the Prefect task retries: ~48 s for ``pbg eval``). A refused connection to
a remote host, a reset, a timeout, a 5xx or throttling stays transient: load balancers and
restarting servers produce those, and they pass.

:func:`refused_loopback` recognises such a failure in an exception chain (the storage error
translation uses it); :func:`install` registers a botocore ``needs-retry`` hook on an s3fs
filesystem's client that ends the request at the first such failure instead of retrying it.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger(__name__)

_HOOK_ID = "pbg-no-retry-refused-loopback"


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback interface."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refused_loopback(err: BaseException) -> tuple[str, int | None] | None:
    """(host, port) when ``err``'s chain is a connection refused by a loopback address, else None.

    Reads what aiohttp and botocore record: ``ClientConnectorError.host/port`` (with the
    ``ConnectionRefusedError`` as its ``os_error``) or ``EndpointConnectionError``'s
    ``endpoint_url`` next to an ``ECONNREFUSED`` in the chain.
    """
    refused = False
    host: str | None = None
    port: int | None = None
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError) or getattr(current, "errno", None) == errno.ECONNREFUSED:
            refused = True
        host = host or getattr(current, "host", None)
        port = port or getattr(current, "port", None)
        kwargs = getattr(current, "kwargs", None)
        if isinstance(kwargs, dict):
            if kwargs.get("endpoint_url") and not host:
                parts = urlsplit(str(kwargs["endpoint_url"]))
                host, port = parts.hostname, parts.port
            inner = kwargs.get("error")
            if isinstance(inner, BaseException) and id(inner) not in seen:
                current = inner  # botocore keeps aiohttp's error in kwargs, not always as a cause
                continue
        current = current.__cause__ or current.__context__ or getattr(current, "os_error", None)
    return (str(host), port) if refused and is_loopback(host) else None


def install(fs: Any) -> None:
    """Make the s3fs filesystem ``fs`` fail at once on a refused loopback connection (idempotent).

    Only filesystems whose endpoint is a loopback address get the hook; it is registered
    first on the client's ``needs-retry`` event and re-raises the connection error, which ends
    the request without botocore's retries. Other failures reach botocore's own handler.
    """
    endpoint = getattr(fs, "endpoint_url", None) or (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url")
    if not is_loopback(urlsplit(str(endpoint or "")).hostname):
        return
    try:
        events = fs.s3.meta.events  # creates the client if needed (no request is made)
    except Exception as exc:  # noqa: BLE001 - no hook only means botocore's usual retries
        logger.debug("no fail-fast hook on %s: %s", endpoint, exc)
        return
    events.register_first("needs-retry.s3", _no_retry_if_refused_loopback, unique_id=_HOOK_ID)


def _no_retry_if_refused_loopback(caught_exception: BaseException | None = None, **_: Any) -> None:
    """botocore ``needs-retry`` handler: re-raise a refused loopback connection (no retry)."""
    if caught_exception is not None and refused_loopback(caught_exception) is not None:
        raise caught_exception
