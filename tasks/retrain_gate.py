"""The quality gate of a retraining run: the previous and the new model on the new edges' holdout.

:func:`evaluate_holdout` ranks the holdout edges (:mod:`storage.holdout`) against a model with the
config's own negatives, as ``pbg eval`` does: ``baseline`` is the model the run starts from,
measured before training (the previous run, with today's new entities started as this run starts
them: at random or at their neighbors' mean), ``trained`` is the committed result. Both figures go
to the run directory's ``retrain.json`` (:mod:`storage.retrain_state`) as soon as they are known, so
a retry measures neither again. :func:`judge_gate` compares them with ``retrain.min_mrr`` and
``retrain.max_mrr_drop``; the flow promotes ``latest.json`` only if it passed.
"""

from __future__ import annotations

from typing import Any, Literal

from prefect import task

from pbg_core.errors import PbgError
from pbg_core.session.build import build_session
from pbg_core.session.offline_eval import evaluate_edge_source
from pbg_core.stats import Stats
from storage.edges import EdgeStore
from storage.retrain_state import RetrainState, as_json, read_state, write_state
from tasks._policies import NO_CACHE, STORAGE_RETRIES, STORAGE_RETRY_DELAYS, retry_if_transient, run_logger
from tasks.by_name import check_ranked_names
from tasks.retrain_options import RetrainOptions
from tasks.runs import get_run

Which = Literal["baseline", "trained"]


class GateFailed(PbgError):
    """The trained model did not pass ``retrain.min_mrr`` / ``retrain.max_mrr_drop``: not promoted."""


@task(
    name="evaluate-holdout",
    task_run_name="evaluate the {which} model on the holdout",
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)
def evaluate_holdout(run: str, which: Which) -> dict[str, float] | None:
    """Average metrics (and ``count``) of the ``which`` model on the run's holdouts; None if there is none.

    ``baseline`` is measured only while nothing is committed and only with an ``init_path`` (a first
    run has no previous model); ``trained`` only once something is committed.

    Args:
        run: The run's handle (:mod:`tasks.runs`); its checkpoint is a retraining run directory.
        which: ``baseline`` (before training) or ``trained`` (after).
    """
    logger = run_logger()
    config, stores = get_run(run).config, get_run(run).stores
    storage = config.storage_options_for_fs()
    state = read_state(config.checkpoint_path, storage)
    if state is None or not state.holdouts:
        return None
    if getattr(state, which) is not None:
        logger.info("%s model on the holdout: measured by an earlier attempt", which)
        return getattr(state, which)  # type: ignore[no-any-return]  # a dict of floats, as written
    version = stores.checkpoint.read_version()
    if which == "baseline" and (stores.init is None or version > 0):
        logger.info("no baseline: %s", "nothing to start from" if stores.init is None else "training has begun")
        return None
    if which == "trained" and version == 0:
        return None
    if which == "trained":  # the baseline reads init_path's rows by name (tasks.by_name), this one by position
        check_ranked_names(config, stores, version, "the quality gate")
    session = build_session(config, stores, read_only=True)
    try:
        stats = Stats.sum(evaluate_edge_source(session, EdgeStore(path, storage)) for path in state.holdouts)
    finally:
        session.close()
    metrics = {name: total / max(stats.count, 1) for name, total in stats.metrics.items()} | {"count": stats.count}
    logger.info("%s model on %d holdout edges: %s", which, stats.count, stats.format())
    setattr(state, which, metrics)
    write_state(config.checkpoint_path, state, storage)
    return metrics


@task(name="judge-gate", task_run_name="quality gate", cache_policy=NO_CACHE)
def judge_gate(run: str, options: RetrainOptions) -> dict[str, Any]:
    """Pass or fail the run against the gate; the run directory's ``retrain.json`` after it.

    Without ``min_mrr`` and ``max_mrr_drop`` every run passes. ``max_mrr_drop`` without a
    baseline (a first run) is not applied, and says so.
    """
    config = get_run(run).config
    storage = config.storage_options_for_fs()
    state = read_state(config.checkpoint_path, storage)
    if state is None:
        return {}
    state.gate, state.reason = gate_verdict(state, options)
    write_state(config.checkpoint_path, state, storage)
    log = run_logger().info if state.gate == "passed" else run_logger().error
    log("quality gate %s: %s", state.gate, state.reason)
    return as_json(state)


def gate_verdict(state: RetrainState, options: RetrainOptions) -> tuple[str, str]:
    """(``passed`` or ``failed``, a line naming the figures compared)."""
    if not options.gated:
        return "passed", "no gate (retrain.min_mrr and retrain.max_mrr_drop unset)"
    trained = state.trained or {}
    if not trained.get("count"):
        return "failed", f"no holdout edge to evaluate in {state.holdouts}; the gate cannot pass without one"
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
        return "failed", f"{figures}: " + "; ".join(problems)
    limits = [f"min_mrr {options.min_mrr:.4f}" if options.min_mrr is not None else ""]
    limits.append(f"max_mrr_drop {options.max_mrr_drop:.4f}" if options.max_mrr_drop is not None else "")
    return "passed", f"{figures}; within " + ", ".join(limit for limit in limits if limit)


def unpromoted_message(state: dict[str, Any], latest: str | None) -> str:
    """The failed run's message: the figures, and what ``latest.json`` still names."""
    kept = f"latest.json still names {latest}" if latest else "no latest.json written"
    return f"quality gate failed, model not promoted ({kept}): {state.get('reason', '')}"


__all__ = ["GateFailed", "evaluate_holdout", "gate_verdict", "judge_gate", "unpromoted_message"]
