"""tasks.retrain_gate: a holdout is not ranked against rows of other names; a failed gate ends the task
Failed with its one line; a retry of a run judged failed is answered from its retrain.json (the
verdict itself: tests/storage/retraining/test_gate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from disk_state import changes, tree_state
from test_by_name import EDGES, committed, imported
from test_by_name import config_for as by_name_config

from storage.checkpoint_names import NamesChangedError
from storage.retraining.options import IncomingOptions, RetrainOptions
from storage.retraining.state import RetrainState, read_state, write_state
from tasks.retrain_gate import RETRIED_NOTE, evaluate_holdout, judge_gate, judged_before
from tasks.runs import opened_run


def test_the_trained_model_is_not_ranked_on_a_holdout_whose_names_moved(tmp_path: Path) -> None:
    """The holdout's edges are ids of the import now: a checkpoint of other names is refused, nothing written."""
    imported(tmp_path, EDGES, seed=0)
    config = by_name_config(tmp_path)
    committed(config)
    write_state(config.checkpoint_path, RetrainState(generation=1, holdouts=[str(tmp_path / "edges")]))
    imported(tmp_path, EDGES[5:] + [("u99", "bought", "i99")], seed=0)  # imported again under the run
    before = tree_state(tmp_path)
    with opened_run(config) as run, pytest.raises(NamesChangedError, match=r"the quality gate would rank each moved"):
        evaluate_holdout.fn(run, "trained")
    assert changes(before, tree_state(tmp_path)) == []


def test_a_failed_gate_is_a_failed_state_naming_both_figures_and_the_limit(tmp_path: Path) -> None:
    imported(tmp_path, EDGES, seed=0)
    config = by_name_config(tmp_path)
    committed(config)
    measured = RetrainState(
        generation=1, holdouts=["h"], baseline={"mrr": 0.5, "count": 40}, trained={"mrr": 0.3, "count": 40}
    )
    write_state(config.checkpoint_path, measured)
    options = RetrainOptions(incoming=IncomingOptions(inputs="in", edges_dir="e"), max_mrr_drop=0.05)
    with opened_run(config) as run:
        state = judge_gate.fn(run, options)
    reason = (
        "MRR 0.3000 on 40 holdout edges of the new data, previous run 0.5000: "
        "0.2000 below the previous run, more than retrain.max_mrr_drop 0.0500"
    )
    assert not isinstance(state, RetrainState) and state is not None
    assert state.is_failed() and state.name == "Failed" and state.message == f"quality gate failed: {reason}"
    judged = read_state(config.checkpoint_path)
    assert judged is not None and (judged.gate, judged.reason) == ("failed", reason)  # retrain.json holds it

    with opened_run(config) as run:  # a passing gate: the judged state, the task Completed
        passed = judge_gate.fn(run, options.model_copy(update={"max_mrr_drop": 0.3}))
    assert isinstance(passed, RetrainState) and passed.gate == "passed"


def test_a_retry_of_a_run_judged_failed_gets_its_verdict_back(tmp_path: Path) -> None:
    config = by_name_config(tmp_path)
    root, run_key = str(tmp_path / "runs"), "run-20261205T030000Z-7d3e91aa"
    config = config.model_copy(update={"checkpoint_path": root})
    assert judged_before.fn(config, run_key, None) is None  # a first attempt
    write_state(f"{root}/{run_key}", RetrainState(generation=1, gate="pending"))
    assert judged_before.fn(config, run_key, None) is None  # stopped before judging: do the work
    write_state(f"{root}/{run_key}", RetrainState(generation=1, gate="failed", reason="MRR 0.1000 ..."))
    before = tree_state(tmp_path)
    again = judged_before.fn(config, run_key, f"{root}/run-20261204T030000Z-00000000")
    assert again is not None and again.generation == 1  # the retried run's name shows it again
    assert again.message == (
        f"quality gate failed, model not promoted (latest.json still names {root}/run-20261204T030000Z-00000000): "
        f"MRR 0.1000 ...{RETRIED_NOTE}"
    )
    assert changes(before, tree_state(tmp_path)) == []
