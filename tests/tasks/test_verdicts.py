"""tasks.verdicts: a verdict is a Failed state with its one line; only runs that returned one are recorded.

Recording inside real flow and task runs: tests/flows/test_retrain_verdicts.py.
"""

from __future__ import annotations

import uuid

import pytest
from prefect.states import Completed, Failed

from tasks import verdicts
from tasks.verdicts import Verdict, is_verdict, is_verdict_run, verdict, verdict_of


def test_a_verdict_outside_a_run_is_a_failed_state_and_records_nothing() -> None:
    before = set(verdicts._verdict_runs)
    state = verdict("quality gate failed: MRR 0.1000 on 40 holdout edges, below retrain.min_mrr 0.2000")
    assert state.is_failed() and state.name == "Failed" and state.data is None
    assert state.message == "quality gate failed: MRR 0.1000 on 40 holdout edges, below retrain.min_mrr 0.2000"
    assert verdicts._verdict_runs == before


def test_only_a_recorded_runs_failed_state_is_a_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    judged, crashed = uuid.uuid4(), uuid.uuid4()
    monkeypatch.setattr(verdicts, "_verdict_runs", {str(judged)})
    assert is_verdict_run(judged) and is_verdict_run(str(judged)) and not is_verdict_run(crashed)
    failed = Failed(message="no new edge list under in (retrain.on_no_new_data: fail)")
    failed.state_details.flow_run_id = judged
    found = verdict_of(failed)
    assert isinstance(found, Verdict) and str(found) == "no new edge list under in (retrain.on_no_new_data: fail)"
    other = Failed(message="Flow run encountered an exception: ValueError: x")
    other.state_details.flow_run_id = crashed
    assert verdict_of(other) is None and not is_verdict(other)
    done = Completed()
    done.state_details.flow_run_id = judged
    assert not is_verdict(done)  # a verdict is a failure
    task = Failed(message="quality gate failed: ...")
    task.state_details.flow_run_id, task.state_details.task_run_id = judged, crashed
    assert not is_verdict(task)  # a task run's own id decides, not its flow's
