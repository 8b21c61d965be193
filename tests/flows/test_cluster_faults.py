"""The ``pbg`` flow on a cluster of real ``dask scheduler`` / ``dask worker`` processes, and its faults.

The workers are started from their command lines on 127.0.0.1 (tests/dask_processes.py) and
read the planted 4x4 graph from this machine's disk (``shared_paths: true``: they share it).
A worker killed with SIGKILL mid-run gives its bucket to the other; a killed scheduler fails
the run within a minute, naming the address, and a rerun on a new cluster resumes it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dask_processes import DaskProcesses

from flows.train import pbg
from pbg_core.config import parse_config
from pbg_core.errors import ClusterError
from storage.checkpoints import CheckpointStore

FIT = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    """A scheduler and two workers able to start processes."""
    processes = DaskProcesses(tmp_path / "dask")
    processes.directory.mkdir()
    processes.start_scheduler()
    processes.start_worker(FIT)
    processes.start_worker(FIT)
    yield processes
    processes.stop()


@pytest.fixture
def raw(make_config: Any, graph_4x4: Any, cluster: DaskProcesses) -> dict[str, Any]:
    return make_config(
        "ckpt", data=graph_4x4, num_epochs=3, num_machines=2, dask_address=cluster.address, shared_paths=True
    )


def bucket_rows(checkpoint: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (checkpoint / "training_stats.json").read_text().splitlines()]
    return [row for row in rows if "eval_stats_chunk_avg" not in row]


def kill_when(condition: Any, action: Any, timeout: float = 120.0) -> threading.Thread:
    """Run ``action`` once ``condition()`` holds (polled every 20 ms), in a thread."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                action()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def recorded(checkpoint: Path) -> int:
    """Buckets recorded in the open version's progress record (0 when there is none)."""
    records = sorted((checkpoint / "progress").glob("v*.json")) if (checkpoint / "progress").exists() else []
    try:
        return max((json.loads(p.read_text())["done"] for p in records), default=0)
    except (OSError, ValueError):
        return 0


def test_a_run_on_command_line_workers_completes(raw: dict[str, Any]) -> None:
    result = pbg(config=parse_config(raw))
    rows = bucket_rows(Path(raw["checkpoint_path"]))
    assert result["version"] == 3 and len(rows) == 48
    assert len({r["machine"] for r in rows}) == 2  # both workers trained


def test_a_worker_killed_mid_run_gives_its_bucket_to_the_other(raw: dict[str, Any], cluster: DaskProcesses) -> None:
    checkpoint = Path(raw["checkpoint_path"])
    victim = cluster.processes[1]  # the first worker's nanny and worker: its process group

    def kill() -> None:
        os.killpg(victim.pid, signal.SIGKILL)

    watcher = kill_when(lambda: recorded(checkpoint) >= 3, kill)
    result = pbg(config=parse_config(raw))
    watcher.join(timeout=1)
    assert victim.poll() is not None  # it was killed during the run
    rows = bucket_rows(checkpoint)
    assert result["version"] == 3
    indices = [r["index"] for r in rows]
    assert sorted(indices) == list(range(48))  # every bucket once: none lost, none recorded twice
    store = CheckpointStore(str(checkpoint))
    for part in range(4):
        assert store.load_embeddings("node", part, 3)[0].shape == (store.embeddings_shape("node", part, 3)[0], 16)


def test_a_lost_scheduler_fails_the_run_within_a_minute_and_a_new_cluster_resumes_it(
    raw: dict[str, Any], cluster: DaskProcesses, tmp_path: Path
) -> None:
    checkpoint = Path(raw["checkpoint_path"])
    scheduler = cluster.processes[0]
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        os.killpg(scheduler.pid, signal.SIGKILL)

    kill_when(lambda: recorded(checkpoint) >= 2 or CheckpointStore(str(checkpoint)).read_version() >= 1, kill)
    with pytest.raises(ClusterError, match=rf"dask_address {cluster.address}: lost the Dask scheduler"):
        pbg(config=parse_config(raw))
    assert killed_at and time.monotonic() - killed_at[0] < 60
    cluster.stop()
    committed = CheckpointStore(str(checkpoint)).read_version()
    again = DaskProcesses(tmp_path / "dask-again")
    again.directory.mkdir()
    try:
        again.start_scheduler()
        again.start_worker(FIT)
        again.start_worker(FIT)
        result = pbg(config=parse_config({**raw, "dask_address": again.address}))
    finally:
        again.stop()
    assert result["version"] == 3 and committed < 3
    assert sorted(r["index"] for r in bucket_rows(checkpoint)) == list(range(48))
