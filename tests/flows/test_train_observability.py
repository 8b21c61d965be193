"""What a training run shows and offers in Prefect: artifacts, pause and resume.

Runs the real ``pbg`` flow on the planted 2x2-partitioned graph under the session's
Prefect test harness and reads the results back through the API.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.flow_runs import resume_flow_run

from flows.train import pbg
from pbg_core.config import parse_config
from storage.metric_labels import HITS10_AFTER, MRR_AFTER, MRR_BEFORE

pytestmark = pytest.mark.integration


def artifacts_of(flow_run_id: UUID) -> list[Any]:
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return sorted(found, key=lambda a: a.created)


def subflow_names(flow_run_id: UUID) -> list[str]:
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]))
        )
    return sorted(run.name for run in runs)


def test_a_run_posts_progress_a_table_per_iteration_and_a_summary(
    graph_2x2: Any, config_for: Any, tmp_path: Path
) -> None:
    config = config_for(graph_2x2, tmp_path / "observed", num_epochs=2)
    state = pbg(config=parse_config(config), return_state=True)
    assert state.is_completed()
    run_id = state.state_details.flow_run_id
    artifacts = artifacts_of(run_id)
    by_type: dict[str, list[Any]] = {}
    for artifact in artifacts:
        by_type.setdefault(artifact.type, []).append(artifact)
    assert sorted(by_type) == ["markdown", "progress"]  # the tables are on the iterations' subflows

    assert [a.data for a in by_type["progress"]] == [100.0]
    assert by_type["progress"][0].description == f"100%: 8 of 8 buckets trained of {tmp_path / 'observed'}"
    with get_client(sync_client=True) as client:
        subflows = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run_id]))
        )
    tables = [artifact for sub in sorted(subflows, key=lambda run: run.name) for artifact in artifacts_of(sub.id)]
    assert [table.type for table in tables] == ["table", "table"]  # one per iteration (2 epochs x 1 path x 1 chunk)
    for epoch, table in enumerate(tables, start=1):
        rows = json.loads(table.data) if isinstance(table.data, str) else table.data
        assert len(rows) == 4  # 2x2 buckets, all trained in this attempt
        assert {"bucket", "loss", MRR_BEFORE, MRR_AFTER, HITS10_AFTER, "edges_per_s"} <= set(rows[0])
        assert all(row["edges_per_s"] > 0 and row[MRR_AFTER] is not None for row in rows)
        assert table.description.startswith(f"epoch {epoch}/2")
    (summary,) = by_type["markdown"]
    assert summary.key == "pbg-summary-observed"
    assert str(tmp_path / "observed") in summary.data and "version **2** (2 of 2 iteration(s) done)" in summary.data
    assert subflow_names(run_id) == ["epoch 1/2, path 1/1, chunk 1/1", "epoch 2/2, path 1/1, chunk 1/1"]


def logs_of(flow_run_ids: list[UUID]) -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=flow_run_ids)))
    return [log.message for log in logs]


def test_engine_lines_reach_the_run_logs(graph_2x2: Any, config_for: Any, tmp_path: Path) -> None:
    state = pbg(config=parse_config(config_for(graph_2x2, tmp_path / "logged", num_epochs=1)), return_state=True)
    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        subflows = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[run_id]))
        )
    ids = [run_id, *(run.id for run in subflows)]
    deadline = time.monotonic() + 60  # logs are shipped in batches
    wanted = ("swapping partitions", "training", "saving its partitions")
    while not all(any(w in line for line in logs_of(ids)) for w in wanted):
        assert time.monotonic() < deadline, f"engine lines missing from the run's logs: {logs_of(ids)[:20]}"
        time.sleep(1)


def _paused_run_id(deadline: float) -> UUID | None:
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            runs = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.PAUSED]))
                )
            )
            if runs:
                return runs[0].id
            time.sleep(0.5)
    return None


@pytest.mark.slow
def test_pause_every_pauses_after_a_commit_and_resumes(graph_2x2: Any, config_for: Any, tmp_path: Path) -> None:
    config = parse_config(config_for(graph_2x2, tmp_path / "paused", num_epochs=2))
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["state"] = pbg(config=config, pause_every=1, pause_timeout_seconds=300, return_state=True)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        paused = _paused_run_id(time.monotonic() + 240)
        assert paused is not None, "the run never paused"
        assert (tmp_path / "paused" / "checkpoint_version.txt").read_text().strip() == "1"
        time.sleep(3)  # still paused: nothing trains while it waits
        assert (tmp_path / "paused" / "checkpoint_version.txt").read_text().strip() == "1"
        resume_flow_run(paused)
    finally:
        thread.join(300)
    assert not thread.is_alive()
    assert outcome["state"].is_completed()
    assert (tmp_path / "paused" / "checkpoint_version.txt").read_text().strip() == "2"
