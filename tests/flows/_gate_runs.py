"""The retraining flow's "quality gate" task run, as the Prefect API records it (for the flow tests)."""

from __future__ import annotations

import time
from typing import Any

from prefect import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId


def judge_state(flow_run_id: Any, wait_s: float = 60.0) -> tuple[str, str | None]:
    """The ``quality gate`` task run's state type and message.

    Task runs reach the server as events, recorded in batches: the flow run can have ended before
    its last task run is there, so this polls for it (``wait_s`` at most)."""
    deadline = time.monotonic() + wait_s
    while True:
        with get_client(sync_client=True) as client:
            runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
        judges = [run for run in runs if run.name == "quality gate" and run.state is not None and run.state.is_final()]
        if judges or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    [judge] = judges
    assert judge.state is not None
    return judge.state.type.value, judge.state.message
