"""Deployment-test fixtures: one local Prefect stack (server, work pool, deployment, worker).

The stack is brought up by ``deployments/local-up.sh`` with a temporary PREFECT_HOME, shared
by every test of this directory, and stopped by ``deployments/local-down.sh`` at the end of
the session, whether the tests passed or not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from stack import Stack, start_stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The running local stack (``stack.api_url``, ``stack.home``)."""
    home = tmp_path_factory.mktemp("prefect-home")
    started = time.monotonic()
    running = start_stack(home)
    print(f"\nlocal stack up in {time.monotonic() - started:.1f} s at {running.api_url}")
    try:
        yield running
    finally:
        running.down()
