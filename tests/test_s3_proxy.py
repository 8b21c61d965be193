"""The fault proxy of ``tests/s3_proxy.py``: faithful forwarding, seeded errors, outages.

Bytes are checked end to end: written through the proxy with s3fs or raw HTTP, read back
from moto directly with boto3 (and the other way round), so a proxy that altered a body,
a header or the chunked framing would fail here.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import socket
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import boto3
import pytest
import s3fs
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError
from s3_proxy import S3Proxy

from bench.lib.s3_server import HOST, S3Server

MiB = 1 << 20


def payload(size: int, seed: int) -> bytes:
    """``size`` pseudo-random bytes (sha256 counter stream: incompressible, reproducible)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest() * 64
        counter += 1
    return bytes(out[:size])


def direct_client(server: S3Server) -> object:
    """A boto3 client talking to moto itself, around the proxy."""
    return boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1")


def proxied_client(proxy: S3Proxy, attempts: int = 1) -> object:
    """A boto3 client through the proxy, with ``attempts`` tries per call (no hidden retries)."""
    config = Config(retries={"total_max_attempts": attempts, "mode": "standard"}, connect_timeout=2, read_timeout=10)
    return boto3.client("s3", endpoint_url=proxy.endpoint_url, region_name="us-east-1", config=config)


@pytest.fixture
def fs(s3_proxy: S3Proxy) -> s3fs.S3FileSystem:
    """An s3fs filesystem through the proxy (own instance, no listings cache)."""
    return s3fs.S3FileSystem(
        endpoint_url=s3_proxy.endpoint_url,
        skip_instance_cache=True,
        use_listings_cache=False,
        config_kwargs={"retries": {"total_max_attempts": 1}},
    )


def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds passed; its last value."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def raw_get(port: int, path: str) -> tuple[int, bytes]:
    """One GET on a fresh connection: (status, body)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# ---- forwarding ------------------------------------------------------------------------------


def test_s3fs_round_trips_small_and_20_mb_objects(
    fs: s3fs.S3FileSystem, s3_proxy: S3Proxy, s3_server: S3Server, s3_bucket: str
) -> None:
    small, big = payload(1000, 1), payload(20 * MiB + 12345, 2)
    fs.pipe_file(f"{s3_bucket}/small.bin", small)
    fs.pipe_file(f"{s3_bucket}/dir/big.bin", big)
    assert fs.cat_file(f"{s3_bucket}/small.bin") == small
    assert fs.cat_file(f"{s3_bucket}/dir/big.bin") == big
    assert fs.cat_file(f"{s3_bucket}/dir/big.bin", start=5 * MiB, end=5 * MiB + 100) == big[5 * MiB : 5 * MiB + 100]
    assert fs.info(f"{s3_bucket}/dir/big.bin")["size"] == len(big)
    assert sorted(fs.ls(s3_bucket, detail=False)) == [f"{s3_bucket}/dir", f"{s3_bucket}/small.bin"]
    # What moto stored is what went in.
    stored = direct_client(s3_server).get_object(Bucket=s3_bucket, Key="dir/big.bin")["Body"].read()
    assert stored == big
    counts = s3_proxy.counters()
    assert counts["forwarded"] >= 7
    assert s3_proxy.faults() == {}


def test_multipart_upload_through_the_proxy(
    fs: s3fs.S3FileSystem, s3_proxy: S3Proxy, s3_server: S3Server, s3_bucket: str
) -> None:
    data = payload(13 * MiB, 3)
    with fs.open(f"{s3_bucket}/multi.bin", "wb", block_size=5 * MiB) as f:
        for start in range(0, len(data), MiB):
            f.write(data[start : start + MiB])
    head = direct_client(s3_server).head_object(Bucket=s3_bucket, Key="multi.bin")
    assert head["ETag"].strip('"').endswith("-3")  # 5 + 5 + 3 MiB parts
    assert direct_client(s3_server).get_object(Bucket=s3_bucket, Key="multi.bin")["Body"].read() == data


def test_chunked_request_body_is_forwarded(s3_proxy: S3Proxy, s3_server: S3Server, s3_bucket: str) -> None:
    data = payload(300_000, 4)
    conn = http.client.HTTPConnection(HOST, s3_proxy.port, timeout=10)
    blocks = [data[i : i + 70_000] for i in range(0, len(data), 70_000)]
    conn.request("PUT", f"/{s3_bucket}/chunked.bin", body=iter(blocks), encode_chunked=True)
    response = conn.getresponse()
    response.read()
    conn.close()
    assert response.status == 200
    assert direct_client(s3_server).get_object(Bucket=s3_bucket, Key="chunked.bin")["Body"].read() == data


def test_boto3_put_with_checksum_and_keep_alive_reuse(s3_proxy: S3Proxy, s3_server: S3Server, s3_bucket: str) -> None:
    client = proxied_client(s3_proxy)
    for i in range(5):  # one client: the pooled keep-alive connection is reused
        data = payload(10_000 + i, 10 + i)
        client.put_object(Bucket=s3_bucket, Key=f"k{i}", Body=data, ChecksumAlgorithm="CRC32")
        assert client.get_object(Bucket=s3_bucket, Key=f"k{i}")["Body"].read() == data
    assert direct_client(s3_server).get_object(Bucket=s3_bucket, Key="k4")["Body"].read() == payload(10_004, 14)
    with pytest.raises(ClientError) as raised:  # upstream errors pass through unchanged
        client.get_object(Bucket=s3_bucket, Key="missing")
    assert raised.value.response["Error"]["Code"] == "NoSuchKey"
    assert s3_proxy.counters() == {"forwarded": 11}


# ---- injected errors -------------------------------------------------------------------------


def faulted_indices(proxy: S3Proxy, bucket: str, count: int) -> list[tuple[int, int, bytes]]:
    """GET the same object ``count`` times; (index, status, body) of the non-200 answers."""
    url = proxied_client(proxy).generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "obj"})
    parts = urlsplit(url)
    out = []
    for i in range(count):
        status, body = raw_get(proxy.port, f"{parts.path}?{parts.query}")
        if status != 200:
            out.append((i, status, body))
        else:
            assert body == b"hello"
    return out


def test_error_share_is_seeded_counted_and_well_formed(s3_proxy: S3Proxy, s3_bucket: str) -> None:
    proxied_client(s3_proxy).put_object(Bucket=s3_bucket, Key="obj", Body=b"hello")
    s3_proxy.error_share(0.25, mix=[(500, "InternalError")], seed=7)
    faults = faulted_indices(s3_proxy, s3_bucket, 400)
    counts = s3_proxy.counters()
    # The share: 100 expected of 400, binomial sd ~8.7; 5 sd either side.
    assert 57 <= len(faults) <= 143
    assert counts["forwarded"] == 1 + 400 - len(faults)
    assert counts.get("503 SlowDown", 0) + counts.get("500 InternalError", 0) == len(faults)
    assert counts["503 SlowDown"] > 20 and counts["500 InternalError"] > 20
    for _, status, body in faults:
        error = ET.fromstring(body)
        assert error.tag == "Error"
        assert (status, error.findtext("Code")) in {(503, "SlowDown"), (500, "InternalError")}
        assert error.findtext("Message") and error.findtext("Resource") == f"/{s3_bucket}/obj"

    # Same seed: the same requests fault again; another seed picks others.
    s3_proxy.error_share(0.25, mix=[(500, "InternalError")], seed=7)
    assert [f[:2] for f in faulted_indices(s3_proxy, s3_bucket, 400)] == [f[:2] for f in faults]
    s3_proxy.error_share(0.25, mix=[(500, "InternalError")], seed=8)
    assert [i for i, _, _ in faulted_indices(s3_proxy, s3_bucket, 400)] != [i for i, _, _ in faults]
    s3_proxy.error_share(0.0)
    assert faulted_indices(s3_proxy, s3_bucket, 20) == []


def test_botocore_sees_the_injected_s3_error(s3_proxy: S3Proxy, s3_bucket: str) -> None:
    client = proxied_client(s3_proxy)
    s3_proxy.error_share(1.0, status=503, code="SlowDown")
    with pytest.raises(ClientError) as raised:
        client.put_object(Bucket=s3_bucket, Key="x", Body=payload(100_000, 5))  # body drained, not sent
    assert raised.value.response["Error"]["Code"] == "SlowDown"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    s3_proxy.error_share(1.0, status=500, code="InternalError")
    with pytest.raises(ClientError) as raised:
        client.list_objects_v2(Bucket=s3_bucket)
    assert raised.value.response["Error"]["Code"] == "InternalError"
    s3_proxy.error_share(0.0)
    # The keep-alive connection survived both faults and the object never reached moto.
    assert client.list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0
    assert s3_proxy.counters() == {"503 SlowDown": 1, "500 InternalError": 1, "forwarded": 1}


def test_bad_arguments_are_refused(s3_proxy: S3Proxy) -> None:
    with pytest.raises(ValueError, match=r"p=1.5: expected a share in \[0, 1\]"):
        s3_proxy.error_share(1.5)
    with pytest.raises(ValueError, match="status 200"):
        s3_proxy.error_share(0.1, status=200)
    with pytest.raises(ValueError, match="seconds=0"):
        s3_proxy.down(0)


# ---- outages ---------------------------------------------------------------------------------


@pytest.fixture
def kept_alive(s3_proxy: S3Proxy, s3_bucket: str) -> Iterator[http.client.HTTPConnection]:
    """An open keep-alive connection to the proxy that has served one request."""
    conn = http.client.HTTPConnection(HOST, s3_proxy.port, timeout=5)
    conn.request("GET", f"/{s3_bucket}?list-type=2")
    response = conn.getresponse()
    response.read()
    assert response.status == 200 and not response.will_close
    yield conn
    conn.close()


def test_down_refuses_connections_and_cuts_open_ones_then_comes_back(
    s3_proxy: S3Proxy, s3_bucket: str, kept_alive: http.client.HTTPConnection
) -> None:
    timer = s3_proxy.down(1.0)
    assert s3_proxy.is_down
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOST, s3_proxy.port), timeout=2).close()
    # The kept-alive connection was closed by the "server": the next request on it fails.
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected, BrokenPipeError)):
        kept_alive.request("GET", f"/{s3_bucket}?list-type=2")
        kept_alive.getresponse().read()
    with pytest.raises(EndpointConnectionError):
        proxied_client(s3_proxy).list_objects_v2(Bucket=s3_bucket)
    timer.join(timeout=10)
    assert not s3_proxy.is_down
    assert raw_get(s3_proxy.port, f"/{s3_bucket}?list-type=2")[0] == 200  # same port
    assert s3_proxy.faults() == {"outage": 1, "dropped": 1}


def test_set_down_and_a_trigger_on_a_forwarded_answer(s3_proxy: S3Proxy, s3_bucket: str) -> None:
    client = proxied_client(s3_proxy)
    s3_proxy.when(
        lambda method, path, status: method == "PUT" and path.endswith("/flag") and status == 200,
        lambda: s3_proxy.set_down(True),
    )
    client.put_object(Bucket=s3_bucket, Key="other", Body=b"1")
    assert not s3_proxy.is_down
    client.put_object(Bucket=s3_bucket, Key="flag", Body=b"1")
    assert wait_until(lambda: s3_proxy.is_down, timeout=5)
    with pytest.raises(EndpointConnectionError):
        client.get_object(Bucket=s3_bucket, Key="flag")
    s3_proxy.set_down(False)
    assert client.get_object(Bucket=s3_bucket, Key="flag")["Body"].read() == b"1"
    client.put_object(Bucket=s3_bucket, Key="flag", Body=b"2")  # fires once only
    assert not s3_proxy.is_down
    assert s3_proxy.counters()["outage"] == 1


def test_fixture_points_the_aws_endpoint_at_the_proxy(s3_proxy: S3Proxy, s3_server: S3Server) -> None:
    assert os.environ["AWS_ENDPOINT_URL"] == s3_proxy.endpoint_url != s3_server.endpoint_url
