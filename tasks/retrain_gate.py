"""The quality gate of a retraining run: the previous and the new model on the new edges' holdout.

:func:`evaluate_holdout` ranks the holdout edges (:mod:`storage.retraining.holdout`) against a model with the
config's own negatives, as ``pbg eval`` does: ``baseline`` is the model the run starts from,
measured before training (the previous run, with today's new entities started as this run starts
them: at random or at their neighbors' mean), ``trained`` is the committed result. Both figures go
to the run directory's ``retrain.json`` (:mod:`storage.retraining.state`) as soon as they are known, so
a retry measures neither again. :func:`judge_gate` compares them with ``retrain.min_mrr`` and
``retrain.max_mrr_drop`` (:func:`storage.retraining.gate.gate_verdict`): failed, the task run
ends Failed with that line (a verdict, :mod:`tasks.verdicts`); the flow promotes ``latest.json``
only if it passed. :func:`judged_before` answers a retry of a run already judged failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pbg_core.config import ConfigSchema
from pbg_core.session.build import build_session
from pbg_core.session.offline_eval import evaluate_edge_source
from pbg_core.stats import Stats
from storage.edges import EdgeStore
from storage.retraining.gate import gate_verdict, unpromoted_message
from storage.retraining.options import RetrainOptions
from storage.retraining.run_dirs import run_dir_url
from storage.retraining.state import RetrainState, read_state, write_state
from tasks._policies import plain_task, run_logger, storage_task
from tasks.by_name import check_ranked_names
from tasks.runs import get_run
from tasks.verdicts import verdict

if TYPE_CHECKING:
    from prefect.client.schemas.objects import State

# Added to the verdict a retried run repeats without training (judged_before).
RETRIED_NOTE = (
    " (retried: the same model on the same holdout gives the same verdict; "
    "the next run trains this data again with what arrives)"
)

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
def judge_gate(run: str, options: RetrainOptions) -> RetrainState | State | None:
    """Pass or fail the run against the gate (:func:`storage.retraining.gate.gate_verdict`), into
    the run directory's ``retrain.json``.

    Returns:
        That state when the gate passed (None when the run has none: nothing was received); when
        it failed, a verdict (:func:`tasks.verdicts.verdict`): the task run ends Failed with
        "quality gate failed: <the figures and the limits>". The flow reads the verdict back from
        ``retrain.json``.
    """
    config = get_run(run).config
    storage = config.storage_options_for_fs()
    state = read_state(config.checkpoint_path, storage)
    if state is None:
        return None
    judged = state.judged(gate_verdict(state, options))
    write_state(config.checkpoint_path, judged, storage)
    if judged.gate == "failed":
        run_logger().warning("quality gate failed: %s", judged.reason)
        return verdict(f"quality gate failed: {judged.reason}")
    run_logger().info("quality gate %s: %s", judged.gate, judged.reason)
    return judged


@storage_task(name="judged-before", task_run_name="judged before?")
def judged_before(config: ConfigSchema, run_key: str, latest: str | None) -> EarlierVerdict | None:
    """The failed verdict an earlier attempt of this run reached (its ``retrain.json``), or None.

    A retry of a run whose gate failed (Prefect's Retry button) would grow, train and judge the
    same model on the same holdout again: the flow returns this line instead, at once.

    Args:
        config: The resolved config; its ``checkpoint_path`` is the root of the run directories.
        run_key: This run's directory name (:func:`storage.layout.run_dir_name`).
        latest: The run directory ``latest.json`` names now (:func:`tasks.retrain.latest_run`).
    """
    storage = config.storage_options_for_fs()
    state = read_state(run_dir_url(config.checkpoint_path, run_key), storage)
    if state is None or state.gate != "failed":
        return None
    return EarlierVerdict(unpromoted_message(state, latest) + RETRIED_NOTE, state.generation)


@dataclass(frozen=True)
class EarlierVerdict:
    """What an earlier attempt of a retried run judged: its one-line verdict, and the generation it
    received (the run's name shows it: a retry is named again from the flow's template)."""

    message: str
    generation: int | None


__all__ = ["RETRIED_NOTE", "EarlierVerdict", "Which", "evaluate_holdout", "judge_gate", "judged_before"]
