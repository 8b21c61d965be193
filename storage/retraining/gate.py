"""The quality gate's verdict: the trained model's MRR on the new data's holdout against the limits.

Pure logic on a run directory's ``retrain.json`` (:class:`~storage.retraining.state.RetrainState`):
the figures were measured by the task :func:`tasks.retrain_gate.evaluate_holdout`; this compares
them with ``retrain.min_mrr`` and ``retrain.max_mrr_drop`` and words the verdict.
"""

from __future__ import annotations

import math

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


DEFAULT_RESOLUTION = 0.05  # the MRR difference a gate without max_mrr_drop is taken to need to see


def min_holdout_edges(max_mrr_drop: float | None) -> int:
    """Holdout edges for an MRR whose 95% interval is about ``max_mrr_drop`` wide each side: ceil((1/d)**2).

    A reciprocal rank lies in [0, 1], so its standard deviation is at most 0.5 and the 95%
    half-width of a mean over n edges at most 1.96 * 0.5 / sqrt(n), about 1/sqrt(n) (n=30: 0.18,
    100: 0.10, 400: 0.05, 1,600: 0.025; docs/retraining.md). ``max_mrr_drop`` unset: 0.05.
    """
    drop = max_mrr_drop if max_mrr_drop else DEFAULT_RESOLUTION
    return math.ceil((1 / drop) ** 2 - 1e-9)  # 1e-9: 1/0.05 is 20.000000000000004 in floating point


def small_holdout(held: int, options: RetrainOptions) -> str | None:
    """The warning for a gated run whose holdout has fewer than :func:`min_holdout_edges` edges, or None."""
    needed = min_holdout_edges(options.max_mrr_drop)
    if not options.gated or held >= needed:
        return None
    drop = options.max_mrr_drop or DEFAULT_RESOLUTION
    fraction = options.incoming.holdout_fraction if options.incoming is not None else None
    return (
        f"the quality gate measures the new data on {held} holdout edges, fewer than the {needed} an MRR needs "
        f"to tell {drop:.2f} apart (its 95% interval is about +-{1 / math.sqrt(max(held, 1)):.2f} wide): "
        f"its verdict is mostly noise; raise retrain.incoming.holdout_fraction ({fraction}) or receive larger "
        "files (docs/retraining.md, 'How large a holdout')"
    )


def unpromoted_message(state: RetrainState, latest: str | None) -> str:
    """The failed run's message: the figures, and what ``latest.json`` still names."""
    kept = f"latest.json still names {latest}" if latest else "no latest.json written"
    return f"quality gate failed, model not promoted ({kept}): {state.reason}"


__all__ = ["DEFAULT_RESOLUTION", "gate_verdict", "min_holdout_edges", "small_holdout", "unpromoted_message"]
