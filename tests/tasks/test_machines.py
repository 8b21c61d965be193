"""tasks.machines: a run's machine on a Dask worker, driven here in-process (the worker's side).

The coordinator hands out real assignments of the 4x4 planted graph; ``train_on_machine`` builds
the machine on first use, reuses it, returns the machine's log lines, and a bucket of another
run closes the previous run's machine first; closing a run while its bucket trains abandons the
bucket at once, without waiting for it and without saving it. The allocator check runs in a child
process started with Dask's nanny environment.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pbg_core.config import parse_config
from pbg_core.distributed.coordinator import Coordinator
from pbg_core.errors import BucketAbandoned
from pbg_core.session.build import build_session
from pbg_core.session.iterations import build_iterations
from storage.run_stores import open_run_stores
from tasks import machines


@pytest.fixture
def coordinator(make_config: Any, graph_4x4: Any) -> Iterator[tuple[Any, Coordinator]]:
    config = parse_config(make_config("ckpt", data=graph_4x4, num_epochs=1, resident_partitions=2))
    session = build_session(config, open_run_stores(config, staged=False), read_ahead=False)
    yield config, Coordinator(session, tree_init=False, evaluate=True)
    session.close()
    for token in machines.open_machines():
        machines.close_machine(token)


def test_a_machine_is_built_once_per_run_and_replaced_by_another_run_s(coordinator: Any) -> None:
    config, coord = coordinator
    coord.start_pass(build_iterations(1, config.edge_paths, 1)[0])
    first = coord.assign("w")
    assert first is not None
    outcome = machines.train_on_machine("run-a", config, first)
    assert outcome.bucket == first.bucket and outcome.saved
    assert any("trained" in line and not step for line, step in outcome.logs)
    assert any(step for _, step in outcome.logs)  # "training N edges": a step line, quiet on a terminal
    machine = machines._MACHINES["run-a"]
    coord.complete("w", outcome)
    second = coord.assign("w")
    assert second is not None
    machines.train_on_machine("run-a", config, second)
    assert machines._MACHINES["run-a"] is machine  # reused: its partitions stayed in memory
    coord.abandon("w")
    third = coord.assign("w")
    assert third is not None
    machines.train_on_machine("run-b", config, third)
    assert machines.open_machines() == ["run-b"]  # run-a's was closed first
    assert machines.close_machine("run-b") and not machines.close_machine("run-b")


class StallAtTraining(logging.Handler):
    """Holds the training thread in Python code for up to a minute once the bucket starts training."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.training = threading.Event()
        self.stalled_to_the_end = False

    def emit(self, record: logging.LogRecord) -> None:
        if "training" not in record.getMessage() or self.training.is_set():
            return
        self.training.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # a long step: only a stop from outside ends it early
            time.sleep(0.01)
        self.stalled_to_the_end = True


def test_closing_a_run_abandons_its_bucket_in_training_at_once_and_saves_nothing(coordinator: Any) -> None:
    config, coord = coordinator
    coord.start_pass(build_iterations(1, config.edge_paths, 1)[0])
    assignment = coord.assign("w")
    assert assignment is not None
    token, raised = f"run-{uuid.uuid4().hex}", []
    stall = StallAtTraining()
    engine = logging.getLogger("pbg_core")
    engine.addHandler(stall)

    def train() -> None:
        try:
            machines.train_on_machine(token, config, assignment)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            raised.append(exc)

    thread = threading.Thread(target=train)
    try:
        thread.start()
        assert stall.training.wait(120)
        assert machines.open_machines() == [token]
        assert machines.close_machine(token) is True  # returns at once: the bucket is still in its long step
        thread.join(30)
    finally:
        engine.removeHandler(stall)
    assert not thread.is_alive() and not stall.stalled_to_the_end
    assert len(raised) == 1 and isinstance(raised[0], BucketAbandoned), raised
    assert str(raised[0]).startswith(f"bucket {tuple(assignment.bucket)} of ")
    assert machines.open_machines() == []  # the training thread closed the machine as it unwound
    area = Path(config.checkpoint_path) / "progress" / f"v1-b{assignment.area}"
    assert not area.exists() or not any(area.iterdir())
    with pytest.raises(BucketAbandoned):  # a later bucket of the closed run never starts
        machines.train_on_machine(token, config, assignment)


def test_a_worker_started_by_dask_s_nanny_gets_glibc_s_allocation_back() -> None:
    # The nanny's environment freezes glibc's mmap threshold; mallopt must succeed in such a process.
    code = "from tasks.machines import undo_dask_malloc_trim; print(undo_dask_malloc_trim())"
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
