"""The ``pbg`` training flow: plan, then one subflow per (epoch, edge path, edge chunk).

Each iteration subflow trains every bucket (swap partitions -> load edges ->
evaluate before -> HOGWILD train -> evaluate after -> save its progress) and then
commits a new checkpoint version in four retryable steps. A rerun of the same config
resumes after the last committed version and, inside the interrupted pass, after the
last saved bucket; raising ``num_epochs`` extends a finished run.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger

from pbg_core.config import ConfigSchema
from pbg_core.iterations import Iteration
from tasks.buckets import (
    evaluate_bucket, finish_bucket, load_edges, schedule_buckets, swap_partitions, train_bucket,
)
from tasks.checkpoint import (
    preserve_version, remove_leftovers, remove_old_version, switch_version, write_checkpoint,
)
from tasks.config import resolve_config
from tasks.lease import acquire_lease, release_lease
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
        finish_bucket(handle)
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
            Credentials are refused here (parameters are recorded in clear): use the AWS_*
            environment variables of the worker, or `storage_options` in a config file.
    """
    logger = get_run_logger()
    resolved = resolve_config(config, config_url, overrides or [])
    results: list[dict[str, Any]] = []
    plan_training(resolved)  # checks the inputs before anything is written
    lease = acquire_lease(resolved)  # a second run on this checkpoint stops here, naming the holder
    try:
        plan = plan_training(resolved)  # again under the lease: another run may have committed meanwhile
        remove_leftovers(resolved, plan.committed_version)  # of a run killed while removing or committing
        if plan.remaining:
            handle = open_training_session(resolved)
            try:
                for iteration in plan.remaining:
                    results.append(train_iteration(handle, iteration, resolved.eval_fraction > 0))
            finally:
                close_training_session(handle)
    finally:
        release_lease(lease)
    final = plan.committed_version + len(results)
    logger.info("checkpoint %s is at version %d of %d", resolved.checkpoint_path, final, plan.total_iterations)
    return {"checkpoint_path": resolved.checkpoint_path, "version": final, "iterations": results}
