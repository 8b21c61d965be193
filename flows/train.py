"""The ``pbg`` training flow: plan, then one subflow per (epoch, edge path, edge chunk).

Each iteration subflow trains every bucket (swap partitions -> load edges ->
evaluate before -> HOGWILD train -> evaluate after) and then commits a new
checkpoint version in four retryable steps. A rerun of the same config resumes
after the last committed version; raising ``num_epochs`` extends a finished run.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger

from pbg_core.config import ConfigSchema
from pbg_core.iterations import Iteration
from tasks.buckets import evaluate_bucket, load_edges, schedule_buckets, swap_partitions, train_bucket
from tasks.checkpoint import preserve_version, remove_old_version, switch_version, write_checkpoint
from tasks.config import resolve_config
from tasks.plan import plan_training
from tasks.sessions import close_training_session, open_training_session


@flow(name="pbg-iteration", flow_run_name="{iteration.label}", validate_parameters=False)
def train_iteration(handle: str, iteration: Iteration, evaluate: bool) -> dict[str, Any]:
    """Train every bucket of one iteration, then commit it as a new checkpoint version."""
    buckets = schedule_buckets(handle, iteration)
    trained = []
    for bucket in buckets:
        swap_partitions(handle, bucket)
        load_edges(handle, bucket)
        before = evaluate_bucket(handle, "before") if evaluate else None
        stats = train_bucket(handle)
        after = evaluate_bucket(handle, "after") if evaluate else None
        trained.append({"bucket": list(bucket), "train": stats, "eval_before": before, "eval_after": after})
    write_checkpoint(handle, iteration)
    switch_version(handle, iteration)
    preserve_version(handle, iteration)
    remove_old_version(handle, iteration)
    return {"version": iteration.version, "buckets": trained}


@flow(name="pbg")
def pbg(
    config: ConfigSchema | None = None,
    config_url: str | None = None,
    overrides: list[str] | None = None,
) -> dict[str, Any]:
    """Train graph embeddings as PyTorch-BigGraph does, resumable at every committed version.

    Args:
        config: The training config (PBG's schema), inline.
        config_url: A JSON or YAML config file (local path, file:// or s3://) instead of `config`.
        overrides: PBG-style `key=value` overrides with dotted paths, e.g. `num_epochs=10`.
    """
    logger = get_run_logger()
    resolved = resolve_config(config, config_url, overrides or [])
    plan = plan_training(resolved)
    results: list[dict[str, Any]] = []
    if plan.remaining:
        handle = open_training_session(resolved)
        try:
            for iteration in plan.remaining:
                results.append(train_iteration(handle, iteration, resolved.eval_fraction > 0))
        finally:
            close_training_session(handle)
    final = plan.committed_version + len(results)
    logger.info("checkpoint %s is at version %d of %d", resolved.checkpoint_path, final, plan.total_iterations)
    return {"checkpoint_path": resolved.checkpoint_path, "version": final, "iterations": results}
