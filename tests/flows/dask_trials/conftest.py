"""Fixtures of the Dask-trial tests: a real scheduler and two workers (``dask scheduler`` / ``dask
worker`` processes on loopback) able to start a trial's HOGWILD processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dask_processes import DaskProcesses

# Dask workers are daemonic by default and then may not start child processes (HOGWILD's).
ABLE_TO_SPAWN = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    """A scheduler and two workers able to start the HOGWILD processes."""
    directory = tmp_path / "dask"
    directory.mkdir()
    processes = DaskProcesses(directory)
    try:
        processes.start_scheduler()
        processes.start_worker(ABLE_TO_SPAWN)
        processes.start_worker(ABLE_TO_SPAWN)
        yield processes
    finally:
        processes.stop()
