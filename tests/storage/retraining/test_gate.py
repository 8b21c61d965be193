"""storage.retraining.gate: the verdict of the quality gate and the message of a failed one."""

from __future__ import annotations

from dataclasses import astuple

import pytest
from pydantic import ValidationError

from storage.retraining.gate import gate_verdict, min_holdout_edges, small_holdout, unpromoted_message
from storage.retraining.options import IncomingOptions, RetrainOptions
from storage.retraining.state import GateResult, RetrainState

INCOMING = IncomingOptions(inputs="in/*.tsv", edges_dir="edges")


def state(trained: float | None, baseline: float | None, count: int = 50) -> RetrainState:
    return RetrainState(
        generation=2,
        holdouts=["edges/gen0002-day2_holdout"],
        trained=None if trained is None else {"mrr": trained, "count": count},
        baseline=None if baseline is None else {"mrr": baseline, "count": count},
    )


def test_without_thresholds_every_run_passes() -> None:
    assert gate_verdict(state(0.01, 0.9), RetrainOptions(incoming=INCOMING)).gate == "passed"


def test_min_mrr_and_max_mrr_drop_each_fail_naming_both_figures() -> None:
    gate = RetrainOptions(incoming=INCOMING, min_mrr=0.3, max_mrr_drop=0.05)
    verdict, reason = astuple(gate_verdict(state(0.25, 0.40), gate))
    assert verdict == "failed"
    assert "MRR 0.2500 on 50 holdout edges" in reason and "previous run 0.4000" in reason
    assert "below retrain.min_mrr 0.3000" in reason and "0.1500 below the previous run" in reason
    assert gate_verdict(state(0.36, 0.40), gate) == GateResult(
        "passed",
        "MRR 0.3600 on 50 holdout edges of the new data, previous run 0.4000; within min_mrr 0.3000, "
        "max_mrr_drop 0.0500",
    )


def test_a_first_run_is_judged_by_min_mrr_only() -> None:
    gate = RetrainOptions(incoming=INCOMING, max_mrr_drop=0.0)
    verdict, reason = astuple(gate_verdict(state(0.1, None), gate))
    assert verdict == "passed" and "previous run none (first run)" in reason


def test_a_gate_without_holdout_edges_fails() -> None:
    verdict, reason = astuple(gate_verdict(state(0.0, 0.5, count=0), RetrainOptions(incoming=INCOMING, min_mrr=0.1)))
    assert verdict == "failed" and "no holdout edge" in reason


def test_a_gate_needs_incoming_files_and_the_message_names_latest() -> None:
    with pytest.raises(ValidationError, match="retrain.min_mrr: a quality gate evaluates on a holdout"):
        RetrainOptions(min_mrr=0.2)
    failed = state(0.1, 0.5).judged(GateResult("failed", "MRR 0.1 ..."))
    message = unpromoted_message(failed, "s3://b/runs/run-x")
    assert message == "quality gate failed, model not promoted (latest.json still names s3://b/runs/run-x): MRR 0.1 ..."


@pytest.mark.parametrize(("drop", "edges"), [(None, 400), (0.05, 400), (0.1, 100), (0.025, 1600), (0.2, 25)])
def test_a_gate_needs_about_one_over_its_drop_squared_holdout_edges(drop: float | None, edges: int) -> None:
    assert min_holdout_edges(drop) == edges


def test_a_small_holdout_is_named_with_its_interval_and_the_way_out() -> None:
    incoming = IncomingOptions(inputs="in", edges_dir="e", holdout_fraction=0.05)
    gated = RetrainOptions(incoming=incoming, max_mrr_drop=0.05)
    warning = small_holdout(30, gated)
    assert warning is not None and warning.startswith(
        "the quality gate measures the new data on 30 holdout edges, fewer than the 400 an MRR needs to tell 0.05 "
        "apart (its 95% interval is about +-0.18 wide)"
    )
    assert "retrain.incoming.holdout_fraction (0.05)" in warning
    assert small_holdout(400, gated) is None
    assert small_holdout(30, RetrainOptions(incoming=incoming)) is None  # no gate: nothing judged on it
    assert small_holdout(99, RetrainOptions(incoming=incoming, min_mrr=0.2)) is not None  # 0.05 when unset
