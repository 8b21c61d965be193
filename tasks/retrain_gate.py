"""The quality gate of a retraining run: the previous and the new model on the new edges' holdout.

:func:`evaluate_holdout` ranks the holdout edges (:mod:`storage.retraining.holdout`) against a model with the
config's own negatives, as ``pbg eval`` does: ``baseline`` is the model the run starts from,
measured before training (the previous run, with today's new entities started as this run starts
them: at random or at their neighbors' mean), ``trained`` is the committed result. Both figures go
to the run directory's ``retrain.json`` (:mod:`storage.retraining.state`) as soon as they are known, so
a retry measures neither again. :func:`judge_gate` compares them with ``retrain.min_mrr`` and
``retrain.max_mrr_drop`` (:func:`storage.retraining.gate.gate_verdict`); the flow promotes
``latest.json`` only if it passed.
"""

from __future__ import annotations

from typing import Literal

from pbg_core.session.build import build_session
from pbg_core.session.offline_eval import evaluate_edge_source
from pbg_core.stats import Stats
from storage.edges import EdgeStore
from storage.retraining.gate import gate_verdict
from storage.retraining.options import RetrainOptions
from storage.retraining.state import RetrainState, read_state, write_state
from tasks._policies import plain_task, run_logger, storage_task
from tasks.by_name import check_ranked_names
from tasks.runs import get_run

Which = Literal["baseline", "trained"]


@storage_task(name="evaluate-holdout", task_run_name="evaluate the {which} model on the holdout")
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
    earlier = state.baseline if which == "baseline" else state.trained
    if earlier is not None:
        logger.info("%s model on the holdout: measured by an earlier attempt", which)
        return earlier
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
    write_state(config.checkpoint_path, state.measured(which, metrics), storage)
    return metrics


@plain_task(name="judge-gate", task_run_name="quality gate")
def judge_gate(run: str, options: RetrainOptions) -> RetrainState | None:
    """Pass or fail the run against the gate (:func:`storage.retraining.gate.gate_verdict`); the run
    directory's ``retrain.json`` after it (None when the run has none: nothing was received)."""
    config = get_run(run).config
    storage = config.storage_options_for_fs()
    state = read_state(config.checkpoint_path, storage)
    if state is None:
        return None
    judged = state.judged(gate_verdict(state, options))
    write_state(config.checkpoint_path, judged, storage)
    log = run_logger().info if judged.gate == "passed" else run_logger().error
    log("quality gate %s: %s", judged.gate, judged.reason)
    return judged


__all__ = ["Which", "evaluate_holdout", "judge_gate"]
