"""The S3 fixtures of the tests, on a moto server (bench.lib.s3_server) on 127.0.0.1.

Fixtures (exposed to every test by ``tests/conftest.py``):

- ``s3_server`` (session): starts ``python -m moto.server`` on a free port of 127.0.0.1 and
  sets ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (dummies), ``AWS_DEFAULT_REGION`` and
  ``AWS_ENDPOINT_URL`` in ``os.environ`` so that s3fs in this process and every subprocess
  (the ``pbg`` CLI) reach it; the previous values are restored at teardown. The yielded
  :class:`~bench.lib.s3_server.S3Server` can be stopped and started again on the same port
  (fault tests); moto keeps no state across a restart.
- ``s3_bucket`` (function): a fresh, empty bucket; its name.
- ``store_root`` (function, parametrized ``local``/``s3``): a base URL to store things
  under, a temporary directory or ``s3://<fresh bucket>/root``. Local cases never start
  the server.

The session fixture also points ``PBG_CACHE_DIR`` (the S3 read cache) at a temporary directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.lib.s3_server import S3Server, create_bucket, new_bucket_name

# Storage options for tests that expect a failure fast: one attempt, short timeouts.
FAST_FAIL_OPTIONS = {
    "config_kwargs": {"connect_timeout": 1, "read_timeout": 2, "retries": {"max_attempts": 1}},
}


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A moto S3 server for the whole session; AWS_* variables point at it until teardown."""
    server = S3Server(log_path=tmp_path_factory.mktemp("moto") / "moto.log")
    # The read cache too, so tests neither see nor fill the user's cache.
    env = {**server.env, "PBG_CACHE_DIR": str(tmp_path_factory.mktemp("pbg-cache"))}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A fresh empty bucket on the session server; its name."""
    if not s3_server.running:  # a fault test left it stopped
        s3_server.start()
    name = new_bucket_name()
    create_bucket(s3_server.endpoint_url, name)
    return name


@pytest.fixture(params=["local", "s3"])
def store_root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A base URL: a temporary directory (``local``) or ``s3://<fresh bucket>/root`` (``s3``)."""
    if request.param == "local":
        return str(tmp_path / "root")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/root"
