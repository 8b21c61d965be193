"""Storage-level exceptions. Every message starts with the URL it is about.

The hierarchy lets callers catch broadly (:class:`StorageError`) or narrowly:

- :class:`DataNotFound`: a file that should exist does not (also a ``FileNotFoundError``).
- :class:`BadDataError`: a file exists but its content is not what the format says
  (also a ``ValueError``); :class:`FormatVersionError` is the special case of a
  wrong ``format_version`` attribute on an HDF5 file.
- :class:`TransientStorageError`: an error worth retrying (network, throttling);
  local disks never raise it, remote filesystems will.
- :class:`StorageUnreachable`: no connection possible (a connection refused by a loopback
  endpoint, or the start-of-run probe failed); permanent.
- :class:`AccessDenied`: the store refused the credentials (or there were none); permanent.
- :class:`OutputNotWritable`: a local output directory that cannot be created (found before any work).
- :class:`BadUrlError`: a URL that cannot name a file (``s3://`` without a bucket, a bad
  bucket name); permanent.
- :class:`FilesystemUnavailable`: a URL scheme whose filesystem cannot load here (unknown, or
  its package or native library is missing); permanent.

:func:`translate` maps what fsspec backends raise (s3fs, botocore, aiohttp, the OS) onto
this hierarchy; :func:`storage.fs.urls.translate_errors` applies it around every remote call.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

from pbg_core.errors import PbgError
from storage.fail_fast import refused_loopback


class StorageError(PbgError):
    """Base class of every error raised on purpose by the storage package.

    Args:
        url: The file or directory the error is about.
        problem: What is wrong, naming the bad value and what was expected.

    Attributes:
        url: As given.
        problem: As given.
    """

    def __init__(self, url: str, problem: str) -> None:
        self.url = url
        self.problem = problem
        super().__init__(f"{url}: {problem}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        # Keeps the two-argument constructor picklable (errors cross process and task boundaries).
        return (type(self), (self.url, self.problem))


class DataNotFound(StorageError, FileNotFoundError):
    """A file or directory that should exist does not."""


class OutputExistsError(StorageError, FileExistsError):
    """An output that must not be overwritten already exists."""


class OutputNotWritable(StorageError):
    """An output directory cannot be created or written (below a file, a read-only place)."""


class BadDataError(StorageError, ValueError):
    """A file exists but its content does not follow the expected format."""


class LimitExceeded(StorageError, ValueError):
    """An input holds more of something (names of one entity type, ...) than a format can number."""


class FormatVersionError(BadDataError):
    """An HDF5 file's ``format_version`` attribute is missing or unsupported.

    Args:
        url: The file.
        found: The attribute value found (None when absent).
        expected: The supported version.
    """

    def __init__(self, url: str, found: object, expected: int) -> None:
        self.found = found
        self.expected = expected
        shown = "no format_version attribute" if found is None else f"format_version={found!r}"
        super().__init__(url, f"found {shown}, expected format_version={expected}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.url, self.found, self.expected))


class TransientStorageError(StorageError):
    """A failure that may succeed if retried (remote filesystems only)."""

    # Read by the task layer's retry predicate (tasks/_policies.py).
    transient = True


class StorageUnreachable(StorageError):
    """The store's endpoint cannot be reached at all (not retried).

    Deliberately not ``transient``: raised by the start-of-run check, where failing in a
    second beats a minute of retries against a wrong endpoint or a server that is down, and
    for any connection refused by a loopback endpoint (nothing listens on that port).
    """

    transient = False


class AccessDenied(StorageError, PermissionError):
    """The store refused access: denied, invalid or missing credentials (not worth retrying)."""


class BadUrlError(StorageError, ValueError):
    """A URL that cannot name a file or directory (e.g. ``s3://`` without a bucket)."""


# Where credentials come from, for AccessDenied messages. Names only: values are secrets.
CREDENTIAL_HINT = (
    "credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
    "AWS_SESSION_TOKEN, AWS_PROFILE, AWS_ENDPOINT_URL) or the config's storage_options "
    "keys 'key', 'secret', 'token', 'profile', 'endpoint_url'"
)

# S3 error codes by meaning (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html).
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "404", "NoSuchUpload"})
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "AllAccessDisabled",
        "AccountProblem",
        "403",
        "InvalidSecurity",
        "TokenRefreshRequired",
    }
)
_BAD_URL_CODES = frozenset({"InvalidBucketName", "KeyTooLongError"})
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "503",
        "500",
        "502",
        "504",
        "BadDigest",
        "XAmzContentSHA256Mismatch",
        "RequestLimitExceeded",
        "OperationAborted",
    }
)
# botocore / aiohttp exception class names, matched by name so that storage does not import
# them: they are optional backends' types (s3fs brings them), absent for local-only installs.
_DENIED_CLASSES = frozenset({"NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError"})
_TRANSIENT_CLASSES = frozenset(
    {
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "HTTPClientError",
        "ResponseStreamingError",
        "IncompleteReadError",
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ClientPayloadError",
        "ClientOSError",
        "ServerTimeoutError",
        "FSTimeoutError",
        "ResponseParserError",
    }
)


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and its causes/contexts, each once (s3fs keeps botocore's error as ``__cause__``)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _s3_code(err: BaseException) -> tuple[str, int]:
    """(error code, HTTP status) of a botocore ``ClientError`` (duck-typed), else ("", 0)."""
    response = getattr(err, "response", None)
    if not isinstance(response, dict):
        return "", 0
    code = str(response.get("Error", {}).get("Code", ""))
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return code, int(status) if isinstance(status, int) else 0


def _class_names(err: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(err).__mro__}


def _classify(err: BaseException) -> str | None:
    """ "not_found", "denied", "bad_url", "transient" or None for one exception of the chain."""
    code, status = _s3_code(err)
    if code in _NOT_FOUND_CODES or status == 404:
        return "not_found"
    if code in _DENIED_CODES or status == 403:
        return "denied"
    if code in _BAD_URL_CODES:
        return "bad_url"
    if code in _TRANSIENT_CODES or status >= 500 or status == 429:
        return "transient"
    names = _class_names(err)
    if names & _DENIED_CLASSES:
        return "denied"
    if names & _TRANSIENT_CLASSES:
        return "transient"
    if isinstance(err, (ConnectionError, TimeoutError, socket.timeout, asyncio.TimeoutError)):
        return "transient"
    if isinstance(err, FileNotFoundError):
        return "not_found"
    if isinstance(err, PermissionError):
        return "denied"
    return None


def translate(err: BaseException, url: str) -> StorageError | None:
    """The storage error that ``err``, raised while accessing ``url``, stands for; None if unknown.

    The most specific cause wins: s3fs turns botocore errors into ``OSError`` subclasses and
    keeps the original as ``__cause__``, so the chain is searched from the outside in and the
    first exception with a known meaning decides. Messages name the URL and the reason (an
    S3 error code or exception type), never credential values.

    Args:
        err: What the filesystem raised.
        url: The URL being accessed.

    Returns:
        A :class:`DataNotFound`, :class:`AccessDenied`, :class:`BadUrlError`,
        :class:`StorageUnreachable` (a connection refused by a loopback endpoint) or
        :class:`TransientStorageError`, or None when ``err`` is none of these (the caller
        re-raises it unchanged). A :class:`StorageError` is returned as is.
    """
    if isinstance(err, StorageError):
        return err
    refused = refused_loopback(err)
    if refused is not None:  # nothing listens there: retrying cannot help (storage.fail_fast)
        host, port = refused
        return StorageUnreachable(
            url,
            f"connection refused by the S3 endpoint {host}{f':{port}' if port else ''}, a loopback address: "
            "no server listens there; start it, or fix storage_options.endpoint_url / AWS_ENDPOINT_URL",
        )
    for link in _chain(err):
        kind = _classify(link)
        if kind is None:
            continue
        coded = next((e for e in _chain(err) if _s3_code(e)[0]), link)  # prefer the S3 error code
        reason = _reason(coded)
        if kind == "not_found":
            return DataNotFound(url, f"does not exist ({reason})")
        if kind == "denied":
            hint = CREDENTIAL_HINT if "://" in url and not url.startswith("file://") else "check file permissions"
            return AccessDenied(url, f"access denied ({reason}); {hint}")
        if kind == "bad_url":
            return BadUrlError(
                url,
                f"rejected by the store ({reason}); expected s3://<bucket>/<key> "
                "with a 3-63 character bucket name of lowercase letters, digits, '.' and '-'",
            )
        return TransientStorageError(url, f"temporary storage failure, worth retrying ({reason})")
    return None


def _reason(err: BaseException) -> str:
    code, status = _s3_code(err)
    if code:
        return f"S3 error {code}" + (f", HTTP {status}" if status else "")
    # Exception messages of connection errors name host and port, never credentials.
    text = str(err).splitlines()[0][:200] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


class FilesystemUnavailable(StorageError, ValueError):
    """A URL whose scheme has no filesystem that can load here: an unknown scheme, a missing package
    (``gs://`` without gcsfs) or a missing native library (``hdfs://`` without libhdfs); permanent."""
