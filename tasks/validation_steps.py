"""Validation during training: rank ``validation.edge_path`` every N epochs, keep the best version, stop early.

Two steps around the commit of an iteration whose validation is due (``flows/train.py``):

1. :func:`validate_version`, after ``write-checkpoint`` and *before* ``switch-version``: ranks the
   validation edges against the version just written (complete: its files are checked before
   they are read) in a read-only session of its own, exactly as ``pbg eval --filtered --version
   N`` does (:func:`pbg_core.session.offline_eval.evaluate_edge_source`, with the same sample and
   candidates for the same seed), and writes the row to ``validation.json``. A kill after the
   commit therefore never loses the row; a row of a version never committed is ignored and
   replaced when that version is written again.
2. :func:`record_best`, after ``switch-version``: points ``best.json`` at the best complete
   committed version (:func:`storage.best_version.choose_best`), logs the one line
   ``validation v7 epoch 14: mrr 0.9412 (best)``, re-posts the table artifact, and says whether
   early stopping ends the run (:func:`pbg_core.evaluation.early_stopping.stop_reason`), or whether
   the run's in-process listener (a tuning trial's pruner, :mod:`tasks.tune_listeners`) stops it.

A run killed between the commit and ``record-best`` is reconciled by ``remove-leftovers``
(:func:`reconcile_best`) before it removes anything; a rerun of a stopped run finds the same
decision in the same rows (:func:`stopped_reason`) and trains nothing.
"""

from __future__ import annotations

import time
from typing import Any

from pbg_core.config import ConfigSchema
from pbg_core.config.quality_sections import ValidationSchema
from pbg_core.errors import ConfigError
from pbg_core.evaluation.early_stopping import ValidationRow, comparable, stop_reason
from pbg_core.evaluation.sampling import candidate_config, ranked_entity_types, sample_edge_positions
from pbg_core.ports import VersionLayout
from pbg_core.session.build import build_session, build_topology
from pbg_core.session.iterations import Iteration
from pbg_core.session.offline_eval import evaluate_edge_source
from storage.best_version import BestVersion, choose_best, read_best
from storage.checkpoints import CheckpointStore
from storage.edges import EdgeStore
from storage.errors import DataNotFound
from storage.pause_points import pause_point
from storage.run_stores import RunStores
from storage.validation_log import ValidationLog
from tasks._policies import run_logger, storage_task
from tasks.artifacts import publish_validation_table
from tasks.runs import get_run
from tasks.sessions import get_session, session_run
from tasks.tune_listeners import notify


def is_due(validation: ValidationSchema | None, iteration: Iteration) -> bool:
    """Whether ``iteration`` ends an epoch after which validation runs (every ``every_epochs`` epochs)."""
    last_of_epoch = (
        iteration.edge_path_idx == iteration.num_edge_paths - 1
        and iteration.edge_chunk_idx == iteration.num_edge_chunks - 1
    )
    return validation is not None and last_of_epoch and (iteration.epoch_idx + 1) % validation.every_epochs == 0


def validation_seed(config: ConfigSchema) -> int:
    """The seed of the validation sample and candidates: the config's (0 if unset), as ``pbg eval``'s default."""
    return config.seed if config.seed is not None else 0


def filter_paths(config: ConfigSchema) -> list[str]:
    """The edge paths whose edges are removed from the negatives: ``validation.filter_paths``, else
    ``edge_paths`` plus the validation edges."""
    validation = _section(config)
    if validation.filter_paths is not None:
        return list(validation.filter_paths)
    return list(dict.fromkeys([*config.edge_paths, validation.edge_path]))


def validation_setup(config: ConfigSchema) -> str:
    """What a validation row ranked and how: rows of another setup are never compared with it."""
    validation = _section(config)
    sample = validation.sample_edges or "all"
    candidates = validation.candidates or "all"
    return (
        f"{validation.edge_path} | filtered by {', '.join(filter_paths(config))} | edges {sample} | "
        f"candidates {candidates} | seed {validation_seed(config)}"
    )


@storage_task(name="check-validation", task_run_name="check the validation edges")
def check_validation(run: str) -> int:
    """Refuse, before training, validation edges that are not there or candidates that cannot be drawn;
    returns the number of validation edges.

    Raises:
        DataNotFound: ``validation.edge_path`` lacks a bucket file or holds no edges (one line naming the field).
        ConfigError: ``validation.candidates`` above the entity count of a ranked partition.
    """
    config, stores = get_run(run).config, get_run(run).stores
    validation = _section(config)
    topology = build_topology(config)
    options = config.storage_options_for_fs()
    try:
        total = sum(EdgeStore(validation.edge_path, options).num_edges(bucket) for bucket in topology.buckets())
    except DataNotFound as err:  # a bucket file (or the directory) missing: name the field that points there
        raise DataNotFound(
            err.url, f"{err.problem} (validation.edge_path; give a directory written by `pbg import`)"
        ) from None
    if total == 0:
        raise DataNotFound(
            validation.edge_path, "validation.edge_path holds no edges; give a directory written by `pbg import`"
        )
    if validation.candidates is not None:
        _check_candidates(config, stores, validation.candidates)
    return total


@storage_task(name="validate-version", task_run_name="validate v{iteration.version}")
def validate_version(handle: str, iteration: Iteration) -> dict[str, Any] | None:
    """Rank the validation edges against the version ``iteration`` wrote and record the row; None if not due.

    Runs before the version is committed (module docstring): the version's files are checked
    complete before they are read.
    """
    config, stores = session_run(handle).config, session_run(handle).stores
    if not is_due(config.validation, iteration):
        return None
    started = time.perf_counter()
    metrics = rank_validation_edges(config, stores, iteration.version)
    row = ValidationRow(
        version=iteration.version,
        epoch=iteration.epoch_idx + 1,
        mrr=metrics["mrr"],
        r1=metrics["r1"],
        r10=metrics["r10"],
        count=int(metrics["count"]),
        sampled=_section(config).sample_edges is not None or _section(config).candidates is not None,
        seconds=round(time.perf_counter() - started, 3),
        setup=validation_setup(config),
    )
    ValidationLog(config.checkpoint_path, config.storage_options_for_fs()).write(row)
    pause_point("validation-row-written")
    return {"version": row.version, "epoch": row.epoch, "mrr": row.mrr, "r1": row.r1, "r10": row.r10}


def rank_validation_edges(config: ConfigSchema, stores: RunStores, version: int) -> dict[str, float]:
    """Average metrics and ``count`` of the validation edges against ``version`` (``pbg eval``'s ranking)."""
    validation = _section(config)
    seed = validation_seed(config)
    options = config.storage_options_for_fs()
    if validation.candidates is not None:
        evaluated = candidate_config(config, validation.candidates, seed)
        session = build_session(evaluated, stores, read_only=True, sampled=True, version=version)
    else:
        session = build_session(_full_ranking_config(config, stores), stores, read_only=True, version=version)
    try:
        source = EdgeStore(validation.edge_path, options)
        positions = None
        if validation.sample_edges is not None:
            buckets = session.settings.buckets()
            drawn = sample_edge_positions([source.num_edges(b) for b in buckets], validation.sample_edges, seed)
            positions = dict(zip(buckets, drawn, strict=True))
        filters = [EdgeStore(path, options) for path in filter_paths(config)]
        stats = evaluate_edge_source(session, source, filters, positions)
    finally:
        session.close()
    count = max(stats.count, 1)
    return {name: stats.metrics.get(name, 0.0) / count for name in ("mrr", "r1", "r10")} | {"count": stats.count}


@storage_task(name="record-best", task_run_name="record the best version after v{iteration.version}")
def record_best(handle: str, iteration: Iteration) -> dict[str, Any]:
    """After the commit of a validated version: best.json, the log line, the table; whether to stop.

    Returns:
        ``{"best": version or None, "stop": the early-stopping or pruning reason, or None}``.
    """
    pause_point("validation-committed")
    config, stores = session_run(handle).config, session_run(handle).stores
    committed = iteration.version
    best = reconcile_best(config, stores.checkpoint, committed, get_session(handle).layout)
    pause_point("validation-best-recorded")
    rows = _rows(config, committed)
    row = next((r for r in rows if r.version == iteration.version), None)
    metric = _section(config).metric
    if row is not None:
        mark = " (best)" if best is not None and best.row == row else ""
        run_logger().info("validation v%d epoch %d: %s %.4f%s", row.version, row.epoch, metric, row.value(metric), mark)
    publish_validation_table(config.checkpoint_path, rows, best.version if best is not None else None)
    reason = _stop_reason(config, rows)
    if row is not None:  # a tuning trial's pruner hears every validation, and may stop the run
        pruned = notify(config.checkpoint_path, len(rows), row.epoch, row.value(metric))
        reason = pruned or reason  # a trial's own end (PRUNED) says so, even where early stopping agrees
    if reason is not None:
        run_logger().info("%s: training stops after v%d", reason, committed)
    return {"best": best.version if best is not None else None, "stop": reason}


def reconcile_best(
    config: ConfigSchema, store: CheckpointStore, committed: int, expected: VersionLayout
) -> BestVersion | None:
    """``best.json`` after making it the best complete committed version of the rows (the config's
    metric and setup); without a validation section it is left as it is (and stays pinned)."""
    if config.validation is None or committed == 0:
        return None
    rows = ValidationLog(store.url, store.storage_options).read()
    choice = (config.validation.metric, validation_setup(config))
    return choose_best(store.url, store.storage_options, rows, choice, committed, expected)


def stopped_reason(config: ConfigSchema, committed: int) -> str | None:
    """Why a run at ``committed`` stops before training anything (early stopping already reached); None: go on.

    The same rows and the same rule as :func:`record_best`: a larger ``patience`` or no
    ``early_stopping`` (``-p early_stopping=null``) lets it go on.
    """
    if config.validation is None or config.early_stopping is None or committed == 0:
        return None
    return _stop_reason(config, _rows(config, committed))


def validation_note(run: str, stopped: str | None) -> str | None:
    """The summary's validation line: the best version (``best.json``) and why training stopped, if it did."""
    config = get_run(run).config
    if config.validation is None:
        return None
    best = read_best(config.checkpoint_path, config.storage_options_for_fs())
    what = (
        f"best version v{best.version} (epoch {best.row.epoch}, {best.metric} {best.value:.4f}), kept as best.json"
        if best is not None
        else "no best version yet"
    )
    return f"{what}. {stopped[0].upper()}{stopped[1:]}." if stopped else f"{what}."


def _rows(config: ConfigSchema, committed: int) -> list[ValidationRow]:
    rows = ValidationLog(config.checkpoint_path, config.storage_options_for_fs()).read()
    return comparable(rows, validation_setup(config), committed)


def _stop_reason(config: ConfigSchema, rows: list[ValidationRow]) -> str | None:
    early = config.early_stopping
    if early is None:
        return None
    return stop_reason(rows, _section(config).metric, early.patience, early.min_delta)


# Spawning a worker process costs 1.5 s (5 s on a loaded machine) while ranking UMLS's 652 validation
# edges against all 135 entities takes 0.05 s: below this many multiply-adds (about half a second
# on one core) a full ranking runs in this process alone. Its result does not depend on the worker
# count; a sampled one (candidates drawn per worker) keeps the config's workers, as `pbg eval`.
ONE_WORKER_MULTIPLY_ADDS = 3e10


def _full_ranking_config(config: ConfigSchema, stores: RunStores) -> ConfigSchema:
    """``config`` as a full ranking runs it: every relation against all entities (``pbg eval -p
    relations.N.all_negs=true -p num_uniform_negs=0``, whatever negatives training samples), on one
    worker when it is small (:data:`ONE_WORKER_MULTIPLY_ADDS`)."""
    validation = _section(config)
    topology = build_topology(config)
    edges = validation.sample_edges or sum(
        EdgeStore(validation.edge_path, config.storage_options_for_fs()).num_edges(b) for b in topology.buckets()
    )
    types = set(ranked_entity_types(config))
    keys = [key for key in [*topology.partitioned_keys(), *topology.unpartitioned_keys()] if key[0] in types]
    largest = max((stores.entities.load_count(*key) for key in keys), default=0)
    work = 2 * edges * largest * config.dimension  # both sides of each edge against every entity
    relations = [relation.model_copy(update={"all_negs": True}) for relation in config.relations]
    update: dict[str, Any] = {"relations": relations, "num_uniform_negs": 0}
    if work < ONE_WORKER_MULTIPLY_ADDS:
        update["workers"] = 1
    return config.model_copy(update=update)


def _section(config: ConfigSchema) -> ValidationSchema:
    if config.validation is None:
        raise ValueError("the config has no validation section")
    return config.validation


def _check_candidates(config: ConfigSchema, stores: RunStores, candidates: int) -> None:
    """``validation.candidates`` must be at most the entity count of every ranked partition."""
    topology = build_topology(config)
    types = set(ranked_entity_types(config))
    keys = [key for key in [*topology.partitioned_keys(), *topology.unpartitioned_keys()] if key[0] in types]
    counts = {key: stores.entities.load_count(*key) for key in keys}
    (entity, part), smallest = min(counts.items(), key=lambda item: (item[1], item[0]))
    if candidates > smallest:
        raise ConfigError(
            [
                f"validation.candidates: {candidates} is above the {smallest:,} entities of entity type {entity!r} "
                f"partition {part} (the fewest of the ranked partitions); allowed: 1 to {smallest:,}"
            ]
        )


__all__ = [
    "check_validation",
    "is_due",
    "rank_validation_edges",
    "reconcile_best",
    "record_best",
    "stopped_reason",
    "validate_version",
    "validation_note",
    "validation_setup",
]
