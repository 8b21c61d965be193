"""An S3-compatible server on this machine: moto's server mode in a subprocess on 127.0.0.1.

Used by the benchmarks that train on S3 (bench.crash, bench.s3_speed) and by the tests'
fixtures (tests/s3_server.py). :class:`S3Server` can be stopped and started again on the same
port (fault tests); moto keeps no state across a restart. Its :attr:`S3Server.env` holds the AWS
variables (dummy credentials, region, endpoint) a client needs to reach it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class S3Server:
    """A moto server subprocess bound to 127.0.0.1.

    Args:
        port: The port to bind (0: pick a free one).
        log_path: Where the server's output goes (its request log), or None to discard it.
        extra_env: Environment variables of the server process only (e.g.
            ``INITIAL_NO_AUTH_ACTION_COUNT=0`` turns on moto's credential checks).
    """

    def __init__(self, port: int = 0, log_path: Path | None = None, extra_env: dict[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.log_path = log_path
        self.extra_env = dict(extra_env or {})
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{HOST}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The AWS variables a client needs to reach this server (dummy credentials)."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint_url,
        }

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server (same port as before) and wait until it answers HTTP."""
        if self.running:
            return
        output = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115 - closed in the finally below, once the child holds its own copy
        env = {**os.environ, **self.extra_env}
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=env,
            )
        finally:
            if self.log_path:
                output.close()
        self._wait_until_up()

    def stop(self) -> None:
        """Stop the server process (its port becomes free; its state is lost)."""
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def _wait_until_up(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"moto server on port {self.port} exited with code {self._process.returncode}")
            try:
                urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1).close()
                return
            except urllib.error.HTTPError:
                return  # any HTTP answer means it is serving
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto server on {self.endpoint_url} did not answer within {START_TIMEOUT_S} s")


def new_bucket_name() -> str:
    """A fresh valid bucket name."""
    return f"pbg-test-{uuid.uuid4().hex[:16]}"


def create_bucket(endpoint_url: str, name: str) -> None:
    """Create bucket ``name`` on the server (boto3, independent of the code under test)."""
    import boto3

    boto3.client("s3", endpoint_url=endpoint_url, region_name="us-east-1").create_bucket(Bucket=name)
