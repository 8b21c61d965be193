"""Offline evaluation of the latest committed checkpoint (``pbg eval``)."""

from __future__ import annotations

from typing import Any

from prefect import task

from pbg_core.errors import ConfigError
from pbg_core.session.build import build_session
from pbg_core.session.offline_eval import evaluate_edge_source
from storage.edges import EdgeStore
from storage.errors import DataNotFound
from tasks._policies import NO_CACHE, STORAGE_RETRIES, STORAGE_RETRY_DELAYS, retry_if_transient, run_logger
from tasks.resume_checks import check_fits
from tasks.runs import get_run
from tasks.sessions import get_session, register_session, session_run


@task(
    name="open-eval-session",
    task_run_name="open evaluation session",
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)
def open_eval_session(run: str, filtered: bool = False) -> str:
    """Load the run's committed checkpoint read-only and start the workers; returns a handle.

    ``run``: the run's handle (:mod:`tasks.runs`): its config and stores.

    Raises:
        ConfigError: filtered metrics asked for relations whose negatives are sampled
            (filtering removes known edges from *all* entities: it needs all_negs).
    """
    config, stores = get_run(run).config, get_run(run).stores
    if filtered:
        sampled = [f"relations.{i}.all_negs" for i, r in enumerate(config.relations) if not r.all_negs]
        if sampled:
            raise ConfigError(
                [
                    f"{key}: false, but filtered evaluation ranks against all entities; set -p {key}=true "
                    "(and num_uniform_negs=0)"
                    for key in sampled
                ]
            )
    version = stores.checkpoint.read_version()
    if version == 0:
        raise DataNotFound(config.checkpoint_path, "no committed checkpoint to evaluate (train first)")
    # Another operator's parameters would be skipped and the metrics silently wrong.
    check_fits(stores.checkpoint, version, config, run_logger(), "evaluated checkpoint")
    session = build_session(config, stores, read_only=True)
    handle = register_session(session, run, prefix="eval")
    run_logger().info("evaluating checkpoint version %d of %s", version, config.checkpoint_path)
    return handle


@task(
    name="evaluate-edge-path",
    task_run_name="evaluate {edge_path}",
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)
def evaluate_edge_path(handle: str, edge_path: str, filter_paths: list[str] | None) -> dict[str, Any]:
    """Rank every edge of ``edge_path``, optionally filtering the edges of ``filter_paths``."""
    session = get_session(handle)
    options = session_run(handle).config.storage_options_for_fs()  # the run's credentials, not a task parameter
    filters = [EdgeStore(path, options) for path in filter_paths] if filter_paths is not None else None
    stats = evaluate_edge_source(session, EdgeStore(edge_path, options), filters)
    run_logger().info("%s: %s", edge_path, stats.format())
    return {"count": stats.count, "sums": stats.metrics}
