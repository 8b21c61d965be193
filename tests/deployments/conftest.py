"""Deployment-test fixtures: one local Prefect stack (server, work pool, deployment, worker) and
the deployment runs several tests read.

The stack is brought up by ``deployments/local-up.sh`` with a temporary PREFECT_HOME, shared
by every test of this directory, and stopped by ``deployments/local-down.sh`` at the end of
the session, whether the tests passed or not. The runs (``shared_runs.py``) are made once, on
first use, and only read afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from shared_runs import run_long, run_uninterrupted
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


@pytest.fixture(scope="session")
def uninterrupted(
    stack: Stack, graph_2x2: Any, config_for: Any, tmp_path_factory: pytest.TempPathFactory
) -> SimpleNamespace:
    """One `prefect deployment run pbg/train` of the 2x2 config, run to completion."""
    return run_uninterrupted(stack, graph_2x2, config_for, tmp_path_factory.mktemp("uninterrupted"))


@pytest.fixture(scope="session")
def long_run(stack: Stack, graph: Any, config_for: Any, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A deployed run of ``LONG_RUN_ITERATIONS`` iterations (one bucket each, no evaluation): many subflows."""
    return run_long(stack, graph, config_for, tmp_path_factory.mktemp("long"))
