"""Offline evaluation of the latest committed checkpoint, or of a chosen version (``pbg eval``).

The edges ranked are (partition, offset) ids of the import the entity files hold now: a
checkpoint whose rows belong to other names (imported again since it was trained) is refused
before any partition is read (:func:`tasks.by_name.check_ranked_names`).
"""

from __future__ import annotations

from typing import Any

import torch

from pbg_core.config import ConfigSchema
from pbg_core.errors import ConfigError
from pbg_core.evaluation.sampling import candidate_config, check_candidates
from pbg_core.session.build import build_session, build_topology
from pbg_core.session.offline_eval import evaluate_edge_source
from storage.best_version import VersionWanted
from storage.checkpoint_reader import resolve_version
from storage.edges import EdgeStore
from storage.errors import DataNotFound
from storage.resume_checks import check_fits
from storage.run_stores import RunStores
from tasks._policies import run_logger, storage_task
from tasks.by_name import check_ranked_names
from tasks.runs import get_run
from tasks.sessions import get_session, register_session, session_run


@storage_task(name="open-eval-session", task_run_name="open evaluation session")
def open_eval_session(
    run: str,
    filtered: bool = False,
    candidates: int | None = None,
    seed: int = 0,
    version: VersionWanted | None = None,
) -> str:
    """Load the run's committed checkpoint (or ``version``) read-only and start the workers; returns a handle.

    ``run``: the run's handle (:mod:`tasks.runs`): its config and stores. ``candidates``:
    rank each side against that many distinct uniform candidates of its partition, drawn
    with ``seed`` (:mod:`pbg_core.evaluation.sampling`); None: the config's negatives. ``version``: a
    version present up to the committed one, or ``"best"`` (the one ``best.json`` names); None: the
    committed one.

    Raises:
        ConfigError: filtered metrics asked for relations whose negatives are sampled
            (filtering removes known edges from *all* entities: it needs all_negs), unless
            ``candidates`` (known edges are then removed from the candidates); ``candidates``
            above a ranked partition's entity count.
        NamesChangedError: the checkpoint's rows belong to other entity names than the entity
            files list now (imported again since; see :func:`tasks.by_name.check_ranked_names`).
    """
    config, stores = get_run(run).config, get_run(run).stores
    if candidates is not None:
        check_candidates(candidates, config, _entity_counts(config, stores))
    elif filtered:
        sampled = [f"relations.{i}.all_negs" for i, r in enumerate(config.relations) if not r.all_negs]
        if sampled:
            raise ConfigError(
                [
                    f"{key}: false, but filtered evaluation ranks against all entities; set -p {key}=true "
                    "(and num_uniform_negs=0)"
                    for key in sampled
                ]
            )
    if stores.checkpoint.read_version() == 0:
        raise DataNotFound(config.checkpoint_path, "no committed checkpoint to evaluate (train first)")
    ranked = resolve_version(stores.checkpoint, config.checkpoint_path, version, "to evaluate")
    # The edges are (partition, offset) ids of the import now: rows that belong to other names are not ranked.
    check_ranked_names(config, stores, ranked, "pbg eval")
    # Another operator's parameters would be skipped and the metrics silently wrong.
    check_fits(stores.checkpoint, ranked, config, run_logger(), "evaluated checkpoint")
    if candidates is not None:
        evaluated = candidate_config(config, candidates, seed)
        session = build_session(evaluated, stores, read_only=True, sampled=True, version=ranked)
    else:
        session = build_session(config, stores, read_only=True, version=ranked)
    handle = register_session(session, run, prefix="eval")
    run_logger().info("evaluating checkpoint version %d of %s", ranked, config.checkpoint_path)
    return handle


@storage_task(name="evaluate-edge-path", task_run_name="evaluate {edge_path}")
def evaluate_edge_path(
    handle: str, edge_path: str, filter_paths: list[str] | None, positions: list[list[int]] | None = None
) -> dict[str, Any]:
    """Rank every edge of ``edge_path``, optionally filtering the edges of ``filter_paths``.

    ``positions``: a sampled evaluation's positions per bucket (in
    ``session.settings.buckets()`` order, see :func:`count_edges`); None ranks every edge.
    """
    session = get_session(handle)
    options = session_run(handle).config.storage_options_for_fs()  # the run's credentials, not a task parameter
    filters = [EdgeStore(path, options) for path in filter_paths] if filter_paths is not None else None
    wanted = None
    if positions is not None:
        buckets = session.settings.buckets()
        wanted = {
            bucket: torch.tensor(rows, dtype=torch.int64) for bucket, rows in zip(buckets, positions, strict=True)
        }
    stats = evaluate_edge_source(session, EdgeStore(edge_path, options), filters, wanted)
    run_logger().info("%s: %s", edge_path, stats.format())
    return {"count": stats.count, "sums": stats.metrics}


@storage_task(name="count-edges", task_run_name="count the edges to sample")
def count_edges(handle: str, edge_paths: list[str]) -> list[list[int]]:
    """Edges per bucket (``session.settings.buckets()`` order) of each edge path: what a sample is drawn from.

    Reads each bucket file's length only, never its edges.
    """
    session = get_session(handle)
    options = session_run(handle).config.storage_options_for_fs()
    counts = []
    for path in edge_paths:
        store = EdgeStore(path, options)
        counts.append([store.num_edges(bucket) for bucket in session.settings.buckets()])
    return counts


def _entity_counts(config: ConfigSchema, stores: RunStores) -> dict[tuple[str, int], int]:
    """Entity count per (entity type, partition) of the config, from the entity files."""
    topology = build_topology(config)
    keys = [*topology.partitioned_keys(), *topology.unpartitioned_keys()]
    return {key: stores.entities.load_count(*key) for key in keys}
