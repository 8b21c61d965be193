"""What the Prefect UI's timeline of a deployed run shows (issue 34, point 6): one iteration at a time.

The run graph and the Runs page draw each subflow from its start to its end time. flows/train.py
creates each iteration's subflow once the previous one has ended, so those intervals follow one
another; and the subflows run without flow-run heartbeats (their heartbeat thread would be joined
as each one ends), while the ``pbg`` run keeps sending its own: what the crash automation of
``deployments/local-up.sh`` and a server's "late run" checks need.

Reads the shared uninterrupted run of ``shared_runs.py`` (5 iterations of the 2x2 planted graph).
"""

from __future__ import annotations

import time
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from run_records import SETTLE_S, timestamp
from shared_runs import NUM_EPOCHS
from stack import Stack

pytestmark = pytest.mark.integration

HEARTBEAT = "prefect.flow-run.heartbeat"


def _iterations(stack: Stack, flow_run_id: str) -> list[dict[str, Any]]:
    """The run's iteration subflows in the order of their labels (epoch 1 first)."""
    subflows = stack.subflow_runs(flow_run_id)
    return sorted(subflows, key=lambda run: int(run["name"].split("/")[0].removeprefix("epoch ")))


def test_each_iteration_starts_after_the_previous_one_ended(stack: Stack, uninterrupted: SimpleNamespace) -> None:
    iterations = _iterations(stack, uninterrupted.id)
    assert [run["name"] for run in iterations] == [
        f"epoch {epoch}/{NUM_EPOCHS}, path 1/1, chunk 1/1" for epoch in range(1, NUM_EPOCHS + 1)
    ]
    assert all(run["state_type"] == "COMPLETED" for run in iterations)
    for before, after in zip(iterations, iterations[1:], strict=False):
        # Both the Running interval the timeline draws and the subflow's creation: nothing of the
        # next iteration exists on the server while the previous one runs.
        assert timestamp(after["start_time"]) >= timestamp(before["end_time"]), (
            f"{after['name']} started at {after['start_time']}, before {before['name']} ended at {before['end_time']}"
        )
        assert timestamp(after["created"]) >= timestamp(before["end_time"]), (
            f"{after['name']} was created at {after['created']}, before {before['name']} ended"
        )


def _heartbeats(stack: Stack, since: str) -> dict[str, int]:
    """Heartbeat events per flow run id since ``since`` (the server persists events in batches)."""
    body = {
        "filter": {
            "event": {"name": [HEARTBEAT]},
            "occurred": {"since": since, "until": datetime.now().astimezone().isoformat()},
        },
        "limit": 50,
    }
    page = stack.api("POST", "/events/filter", body)
    counts: dict[str, int] = {}
    for event in page["events"]:
        run_id = event["resource"]["prefect.resource.id"].removeprefix("prefect.flow-run.")
        counts[run_id] = counts.get(run_id, 0) + 1
    return counts


def test_only_the_pbg_run_sends_heartbeats_not_its_iterations(stack: Stack, uninterrupted: SimpleNamespace) -> None:
    since = uninterrupted.run["start_time"]
    deadline = time.monotonic() + SETTLE_S
    counts = _heartbeats(stack, since)
    while uninterrupted.id not in counts and time.monotonic() < deadline:
        time.sleep(1)  # the event persister writes in batches, after the run's end too
        counts = _heartbeats(stack, since)
    # The pbg run's thread sends one as it starts, then every 30 s (deployments/prefect.yaml).
    assert counts.get(uninterrupted.id, 0) >= 1, f"no heartbeat of the pbg run {uninterrupted.id}: {counts}"
    iteration_ids = {run["id"] for run in _iterations(stack, uninterrupted.id)}
    assert not iteration_ids & set(counts), f"iteration subflows sent heartbeats: {counts}"
