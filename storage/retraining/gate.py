"""The quality gate's verdict: the trained model's MRR on the new data's holdout against the limits.

Pure logic on a run directory's ``retrain.json`` (:class:`~storage.retraining.state.RetrainState`):
the figures were measured by the task :func:`tasks.retrain_gate.evaluate_holdout`; this compares
them with ``retrain.min_mrr`` and ``retrain.max_mrr_drop`` and words the verdict.
"""

from __future__ import annotations

from storage.retraining.options import RetrainOptions
from storage.retraining.state import GateResult, RetrainState


def gate_verdict(state: RetrainState, options: RetrainOptions) -> GateResult:
    """``passed`` or ``failed``, with a line naming the figures compared.

    Without ``min_mrr`` and ``max_mrr_drop`` every run passes. ``max_mrr_drop`` without a
    baseline (a first run) is not applied, and the line says so.
    """
    if not options.gated:
        return GateResult("passed", "no gate (retrain.min_mrr and retrain.max_mrr_drop unset)")
    trained = state.trained or {}
    if not trained.get("count"):
        return GateResult(
            "failed", f"no holdout edge to evaluate in {state.holdouts}; the gate cannot pass without one"
        )
    mrr, count = trained.get("mrr", 0.0), int(trained["count"])
    previous = (state.baseline or {}).get("mrr")
    figures = f"MRR {mrr:.4f} on {count} holdout edges of the new data, previous run " + (
        f"{previous:.4f}" if previous is not None else "none (first run)"
    )
    problems = []
    if options.min_mrr is not None and mrr < options.min_mrr:
        problems.append(f"below retrain.min_mrr {options.min_mrr:.4f}")
    if options.max_mrr_drop is not None and previous is not None and previous - mrr > options.max_mrr_drop:
        problems.append(
            f"{previous - mrr:.4f} below the previous run, more than retrain.max_mrr_drop {options.max_mrr_drop:.4f}"
        )
    if problems:
        return GateResult("failed", f"{figures}: " + "; ".join(problems))
    limits = [f"min_mrr {options.min_mrr:.4f}" if options.min_mrr is not None else ""]
    limits.append(f"max_mrr_drop {options.max_mrr_drop:.4f}" if options.max_mrr_drop is not None else "")
    return GateResult("passed", f"{figures}; within " + ", ".join(limit for limit in limits if limit))


def unpromoted_message(state: RetrainState, latest: str | None) -> str:
    """The failed run's message: the figures, and what ``latest.json`` still names."""
    kept = f"latest.json still names {latest}" if latest else "no latest.json written"
    return f"quality gate failed, model not promoted ({kept}): {state.reason}"


__all__ = ["gate_verdict", "unpromoted_message"]
