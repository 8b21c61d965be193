"""tasks.retrain_gate: the verdict of the quality gate, the message of a failed one, and a holdout not
ranked against rows of other names."""

from __future__ import annotations

from pathlib import Path

import pytest
from disk_state import changes, tree_state
from pydantic import ValidationError
from test_by_name import EDGES, committed, imported
from test_by_name import config_for as by_name_config

from storage.checkpoint_names import NamesChangedError
from storage.retrain_state import RetrainState, write_state
from tasks.retrain_gate import evaluate_holdout, gate_verdict, unpromoted_message
from tasks.retrain_options import IncomingOptions, RetrainOptions
from tasks.runs import opened_run

INCOMING = IncomingOptions(inputs="in/*.tsv", edges_dir="edges")


def state(trained: float | None, baseline: float | None, count: int = 50) -> RetrainState:
    return RetrainState(
        generation=2,
        holdouts=["edges/gen0002-day2_holdout"],
        trained=None if trained is None else {"mrr": trained, "count": count},
        baseline=None if baseline is None else {"mrr": baseline, "count": count},
    )


def test_without_thresholds_every_run_passes() -> None:
    assert gate_verdict(state(0.01, 0.9), RetrainOptions(incoming=INCOMING))[0] == "passed"


def test_min_mrr_and_max_mrr_drop_each_fail_naming_both_figures() -> None:
    gate = RetrainOptions(incoming=INCOMING, min_mrr=0.3, max_mrr_drop=0.05)
    verdict, reason = gate_verdict(state(0.25, 0.40), gate)
    assert verdict == "failed"
    assert "MRR 0.2500 on 50 holdout edges" in reason and "previous run 0.4000" in reason
    assert "below retrain.min_mrr 0.3000" in reason and "0.1500 below the previous run" in reason
    assert gate_verdict(state(0.36, 0.40), gate) == (
        "passed",
        "MRR 0.3600 on 50 holdout edges of the new data, previous run 0.4000; within min_mrr 0.3000, "
        "max_mrr_drop 0.0500",
    )


def test_a_first_run_is_judged_by_min_mrr_only() -> None:
    gate = RetrainOptions(incoming=INCOMING, max_mrr_drop=0.0)
    verdict, reason = gate_verdict(state(0.1, None), gate)
    assert verdict == "passed" and "previous run none (first run)" in reason


def test_a_gate_without_holdout_edges_fails() -> None:
    verdict, reason = gate_verdict(state(0.0, 0.5, count=0), RetrainOptions(incoming=INCOMING, min_mrr=0.1))
    assert verdict == "failed" and "no holdout edge" in reason


def test_a_gate_needs_incoming_files_and_the_message_names_latest() -> None:
    with pytest.raises(ValidationError, match="retrain.min_mrr: a quality gate evaluates on a holdout"):
        RetrainOptions(min_mrr=0.2)
    message = unpromoted_message({"reason": "MRR 0.1 ..."}, "s3://b/runs/run-x")
    assert message == "quality gate failed, model not promoted (latest.json still names s3://b/runs/run-x): MRR 0.1 ..."


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
