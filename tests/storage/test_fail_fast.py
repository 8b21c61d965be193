"""Fail fast on S3 (``storage.fail_fast`` and the error translation), against the moto server.

Errors that retries cannot fix fail at the first attempt with the URL in the message; transient
ones keep botocore's retries. Attempts are counted on the real botocore client of the
filesystem under test (its ``before-send`` event fires once per HTTP attempt), never in seconds.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from s3_proxy import S3Proxy, s3_proxy  # noqa: F401  (fixture)

from bench.lib.s3_server import S3Server, free_port, new_bucket_name
from storage.errors import DataNotFound, StorageUnreachable, TransientStorageError
from storage.fail_fast import is_loopback, refused_loopback
from storage.fs import atomic, reads, urls
from tasks._policies import is_transient


class Attempts:
    """HTTP attempts made by the botocore client of one URL's filesystem."""

    def __init__(self, url: str, options: dict[str, Any] | None) -> None:
        self.events = urls.resolve(url, options)[0].s3.meta.events
        self.sent: list[tuple[str, str]] = []
        self.events.register("before-send.s3", self._sent, unique_id="test-attempts")

    def _sent(self, request: Any, **_: Any) -> None:
        self.sent.append((request.method, request.url))

    @property
    def count(self) -> int:
        """Attempts so far."""
        return len(self.sent)

    @property
    def repeated(self) -> int:
        """Attempts that repeated an earlier request (retries)."""
        return len(self.sent) - len(set(self.sent))

    def close(self) -> None:
        self.events.unregister("before-send.s3", unique_id="test-attempts")


@pytest.fixture
def attempts() -> Iterator[Callable[[str, dict[str, Any] | None], Attempts]]:
    opened: list[Attempts] = []

    def count(url: str, options: dict[str, Any] | None = None) -> Attempts:
        opened.append(Attempts(url, options))
        return opened[-1]

    yield count
    for counter in opened:
        counter.close()


@pytest.fixture
def two_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's legacy mode with 2 attempts per request (read when s3fs makes a client)."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("AWS_RETRY_MODE", "legacy")


def test_a_closed_loopback_port_fails_at_the_first_attempt(s3_server: S3Server, attempts: Any) -> None:
    """botocore's defaults (5 attempts with back-off) used to spend ~8 s per request on it."""
    options = {"endpoint_url": f"http://127.0.0.1:{free_port()}"}  # a new port: a new cached filesystem
    url = "s3://bkt/ckpt/checkpoint_version.txt"
    sent = attempts(url, options)
    for call in (
        lambda: reads.read_text(url, options),
        lambda: atomic.write_text_atomic(url, "1\n", options),
        lambda: reads.exists(url, options),
    ):
        before = sent.count
        with pytest.raises(StorageUnreachable) as info:
            call()
        assert sent.count - before == 1
        message = str(info.value)
        assert message.startswith(f"{url}: connection refused by the S3 endpoint 127.0.0.1:") and "\n" not in message
        assert not is_transient(info.value)  # so no Prefect task retry either


def test_a_stopped_server_fails_at_the_first_attempt(s3_server: S3Server, s3_bucket: str, attempts: Any) -> None:
    url = f"s3://{s3_bucket}/data/x.txt"
    atomic.write_text_atomic(url, "x")
    sent = attempts(url, None)
    s3_server.stop()
    try:
        with pytest.raises(StorageUnreachable, match=rf"^{url}: connection refused"):
            reads.read_text(url)
        assert sent.count == 1
    finally:
        s3_server.start()


def test_a_missing_bucket_fails_at_the_first_attempt(s3_server: S3Server, attempts: Any) -> None:
    url = f"s3://{new_bucket_name()}/data/x.txt"
    sent = attempts(url, None)
    with pytest.raises(DataNotFound, match=rf"^{url}: does not exist"):
        reads.read_text(url)
    # s3fs asks twice (HEAD of the key, then a listing: is it a directory?), each once.
    assert sent.count == 2 and sent.repeated == 0


def test_a_5xx_answer_still_retries(
    two_attempts: None,
    s3_proxy: S3Proxy,  # noqa: F811 - pytest fixtures imported from tests/ and used as parameters
    s3_bucket: str,
    attempts: Any,
) -> None:
    url = f"s3://{s3_bucket}/data/x.txt"
    sent = attempts(url, None)
    s3_proxy.error_share(1.0, status=500, code="InternalError")
    with pytest.raises(TransientStorageError, match=rf"^{url}: temporary storage failure"):
        reads.read_text(url)
    assert sent.count == 2 and sent.repeated == 1 and s3_proxy.faults() == {"500 InternalError": 2}


def test_connection_resets_on_a_loopback_endpoint_still_retry(
    two_attempts: None,
    s3_proxy: S3Proxy,  # noqa: F811 - pytest fixtures imported from tests/ and used as parameters
    s3_bucket: str,
    attempts: Any,
) -> None:
    """A reset is what a restarting server gives: worth retrying, even on this machine."""
    url = f"s3://{s3_bucket}/data/x.txt"
    atomic.write_text_atomic(url, "x")
    sent = attempts(url, None)
    s3_proxy.set_resetting(True)
    try:
        with pytest.raises(TransientStorageError) as info:
            reads.read_text(url)
        assert is_transient(info.value)
        assert sent.count == 2 and sent.repeated == 1
    finally:
        s3_proxy.set_resetting(False)
    assert reads.read_text(url) == "x"


def test_loopback_hosts() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.8.0.3", "::1", "[::1]", "localhost", "LOCALHOST", "x.localhost"]))
    assert not any(map(is_loopback, ["10.0.0.1", "s3.amazonaws.com", "minio", "", None, "0.0.0.0"]))


def test_only_a_refused_connection_to_a_loopback_host_counts() -> None:
    from aiohttp.client_exceptions import ClientConnectorError
    from aiohttp.client_reqrep import ConnectionKey
    from botocore.exceptions import EndpointConnectionError

    def connector_error(host: str, os_error: OSError) -> ClientConnectorError:
        key = ConnectionKey(host, 9000, False, True, None, None, None, None)
        return ClientConnectorError(key, os_error)

    def botocore_error(host: str, os_error: OSError) -> EndpointConnectionError:
        inner = connector_error(host, os_error)
        err = EndpointConnectionError(endpoint_url=f"http://{host}:9000/b/k", error=inner)
        err.__cause__ = inner
        return err

    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed")
    reset = ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
    assert refused_loopback(botocore_error("127.0.0.1", refused)) == ("127.0.0.1", 9000)
    assert refused_loopback(connector_error("localhost", refused)) == ("localhost", 9000)
    assert refused_loopback(botocore_error("minio.internal", refused)) is None  # remote: may come back
    assert refused_loopback(botocore_error("127.0.0.1", reset)) is None  # a reset stays transient
