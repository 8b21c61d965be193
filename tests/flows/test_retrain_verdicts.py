"""A retraining run's expected verdicts end it Failed with one line and no traceback (issue 34).

Real ``pbg-retrain`` flow runs on the test harness's API, their logs read back from it:

- nothing new under ``on_no_new_data: fail``: the flow run and its ``no-new-data`` task end
  Failed with the one line; ``pbg retrain`` prints it and exits 1;
- Retry of a run whose gate failed: run as a deployment's worker runs it (``run_flow`` with the
  run's logger as ``error_logger``, as ``prefect.engine`` does, which logs "Engine execution exited
  with unexpected exception" for a Failed result), it returns the same verdict at once, imports
  and trains nothing, and its logs hold the line but no traceback.

The gate failing after training is in tests/flows/test_retrain_flow.py (slow) and the deployed
third night in tests/deployments/test_retrain_deployment.py.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from uuid import UUID

import pytest
from _cli import cli_environment, run_pbg
from disk_state import changes, tree_state
from prefect import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId
from prefect.client.schemas.objects import Artifact
from prefect.exceptions import FailedRun
from prefect.flow_engine import run_flow
from prefect.logging.loggers import flow_run_logger
from test_retrain_flow import config, days, options_for, write_config, write_tsv

from flows.retrain import pbg_retrain
from storage import layout
from storage.retraining.state import GateResult, RetrainState, write_state
from tasks.artifacts import retrain_history_key
from tasks.retrain_gate import RETRIED_NOTE

NOISE = ("Traceback", "NoneType: None", "Engine execution exited", "Task run failed with state")


def run_logs(flow_run_id: UUID, wanted: str) -> list[str]:
    """The run's log lines in the API, once one holds ``wanted`` (logs are shipped in batches)."""
    deadline = time.monotonic() + 60
    while True:
        with get_client(sync_client=True) as client:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
        messages = [log.message for log in logs]
        if any(wanted in message for message in messages) or time.monotonic() > deadline:
            return messages
        time.sleep(0.5)


def history(flow_run_id: UUID) -> list[Artifact]:
    """The retraining history versions the run posted."""
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return [artifact for artifact in artifacts if (artifact.key or "").startswith("pbg-retrain-")]


def task_states(flow_run_id: UUID) -> dict[str, str]:
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {run.name: run.state.type.value for run in runs if run.state is not None}


def test_nothing_new_under_on_no_new_data_fail_is_a_failed_state_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "incoming").mkdir()
    options = options_for(tmp_path).model_copy(update={"on_no_new_data": "fail"})
    state = pbg_retrain(config=config(tmp_path), retrain=options, return_state=True)
    expected = (
        f"no new edge list under {tmp_path / 'incoming'} and no imported generation newer than the latest "
        "promoted run's (retrain.on_no_new_data: fail)"
    )
    assert state.is_failed() and state.name == "Failed" and state.message == expected
    run_id = state.state_details.flow_run_id
    assert task_states(run_id)["nothing new: fail"] == "FAILED"
    logs = run_logs(run_id, "Finished in state Failed")
    assert any(expected in line for line in logs), logs
    assert not [line for line in logs if any(noise in line for noise in NOISE)], logs
    [night] = history(run_id)  # the night is a version of the root's history, in words
    assert night.key == retrain_history_key(str(tmp_path / "runs"))
    assert night.description.endswith(": nothing new, run failed (retrain.on_no_new_data: fail); no model promoted yet")
    with pytest.raises(FailedRun, match=r"on_no_new_data: fail\)$"):  # called as a function: Prefect's FailedRun
        pbg_retrain(config=config(tmp_path), retrain=options)


def test_a_retried_run_whose_gate_failed_returns_the_same_verdict_at_once_without_a_traceback(tmp_path: Path) -> None:
    day0 = days(random.Random(7))[0]
    (tmp_path / "incoming").mkdir()
    write_tsv(tmp_path / "incoming" / "day0.tsv", day0)  # arrived, but a retry imports nothing
    options = options_for(tmp_path, max_mrr_drop=0.1)
    with get_client(sync_client=True) as client:
        flow_run = client.create_flow_run(pbg_retrain, parameters={})
    run_key = layout.run_dir_name(str(flow_run.id), flow_run.expected_start_time)
    reason = "MRR 0.1000 on 40 holdout edges of the new data, previous run 0.5000: 0.4000 below the previous run"
    judged = RetrainState(generation=1, new_generations=[1], trained={"mrr": 0.1, "count": 40}).judged(
        GateResult("failed", reason)
    )
    write_state(str(tmp_path / "runs" / run_key), judged)
    before = tree_state(tmp_path)

    parameters = {"config": config(tmp_path), "retrain": options}
    with pytest.raises(FailedRun):  # what prefect.engine's run_flow raises to the worker's process
        run_flow(pbg_retrain, flow_run=flow_run, parameters=parameters, error_logger=flow_run_logger(flow_run))

    with get_client(sync_client=True) as client:
        retried = client.read_flow_run(flow_run.id)
    state = retried.state
    assert state is not None and state.type.value == "FAILED" and state.name == "Failed"
    message = state.message or ""
    assert message == f"quality gate failed, model not promoted (no latest.json written): {reason}{RETRIED_NOTE}"
    assert retried.name.endswith(", generation 1"), retried.name  # named again from the template, then this
    assert changes(before, tree_state(tmp_path)) == []  # nothing imported, grown or trained
    assert "import what arrived" not in task_states(flow_run.id)
    logs = run_logs(flow_run.id, "Finished in state Failed")
    assert any("Finished in state Failed" in line and "retried" in line for line in logs), logs
    assert not [line for line in logs if any(noise in line for noise in NOISE)], logs


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect_home"))


def test_pbg_retrain_with_nothing_new_prints_one_line_and_exits_1(tmp_path: Path, cli_env: dict[str, str]) -> None:
    (tmp_path / "incoming").mkdir()
    write_config(tmp_path)
    args = ["retrain", "config.json", "--incoming", "incoming", "--edges-dir", "edges", "--on-no-new-data", "fail"]
    done = run_pbg(cli_env, tmp_path, *args)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("pbg retrain: error: no new edge list under incoming"), done.stderr
    assert last.endswith("(retrain.on_no_new_data: fail)") and "Traceback" not in done.stderr
