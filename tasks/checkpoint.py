"""Checkpoint steps of an iteration: write, switch, preserve, remove.

Each is idempotent (a retry rewrites the same version-``v+1`` names or finds
the work done) and retried on transient storage faults. ``switch_version`` is
the commit point.
"""

from __future__ import annotations

from typing import Any

from prefect import task

from pbg_core.config import ConfigSchema
from pbg_core.session.iterations import Iteration, build_iterations, should_preserve
from storage.checkpoints import CheckpointStore
from tasks._policies import NO_CACHE, STORAGE_RETRIES, STORAGE_RETRY_DELAYS, retry_if_transient, run_logger
from tasks.disk_checks import check_before_checkpoint
from tasks.lease import check_lease
from tasks.runs import get_run
from tasks.sessions import get_session, session_run

_STORAGE: dict[str, Any] = dict(
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)


@task(name="write-checkpoint", task_run_name="write checkpoint v{iteration.version}", **_STORAGE)
def write_checkpoint(handle: str, iteration: Iteration) -> int:
    """Write partitions, model, optimizer state and stats rows as the new version (once the disk has room)."""
    session = get_session(handle)
    check_before_checkpoint(session, session_run(handle).config, iteration)
    return session.write_checkpoint(iteration)


@task(name="switch-version", task_run_name="switch to v{iteration.version}", **_STORAGE)
def switch_version(handle: str, iteration: Iteration) -> int:
    """Atomically point the checkpoint at the new version (refused if this run lost its lease)."""
    session = get_session(handle)
    check_lease(session.store.url)
    return session.switch_version(iteration)


@task(name="preserve-version", task_run_name="preserve v{iteration.version} if due", **_STORAGE)
def preserve_version(handle: str, iteration: Iteration) -> int | None:
    """Keep an ``epoch_{N}`` snapshot when checkpoint_preservation_interval asks for one."""
    return get_session(handle).preserve_version(iteration)


@task(name="remove-old-version", task_run_name="remove versions before v{iteration.version}", **_STORAGE)
def remove_old_version(handle: str, iteration: Iteration) -> int | None:
    """Delete the previous version's files now that the new pointer is durable."""
    return get_session(handle).remove_old_version(iteration)


@task(name="remove-leftovers", task_run_name="remove leftovers of interrupted runs", **_STORAGE)
def remove_leftovers(run: str, committed_version: int, num_edge_chunks: int) -> list[int]:
    """Finish the commit of an interrupted run: its epoch snapshot, then delete what it left.

    A run killed after committing and before its ``preserve-version`` finished leaves the
    committed version's ``epoch_{N}`` snapshot missing or incomplete: it is copied again
    (the committed files are still there). A run killed while removing the old version (or
    right after committing, before clearing its progress) leaves older versions and
    progress that nothing references: they are deleted. ``run``: the run's handle
    (:mod:`tasks.runs`); ``num_edge_chunks``: the plan's. Returns the versions removed.
    """
    run_state = get_run(run)
    stores = run_state.stores
    _preserve_if_missing(run_state.config, stores.checkpoint, committed_version, num_edge_chunks)
    old = stores.checkpoint.remove_versions_before(committed_version)
    progress = stores.progress
    try:
        progress.clear(keep_version=committed_version + 1)
    finally:
        progress.close()
    return old


def _preserve_if_missing(
    config: ConfigSchema, store: CheckpointStore, committed_version: int, num_edge_chunks: int
) -> int | None:
    """Redo the committed version's snapshot when it was due and is not complete; its epoch, or None."""
    iterations = build_iterations(config.num_epochs, config.edge_paths, num_edge_chunks)
    if not 0 < committed_version <= len(iterations):
        return None
    epoch = should_preserve(iterations[committed_version - 1], config.checkpoint_preservation_interval)
    if epoch is None or store.snapshot_version(epoch) == committed_version:
        return None
    run_logger().warning(
        "epoch_%d snapshot of v%d is missing or incomplete: copying it again", epoch, committed_version
    )
    store.preserve_version(committed_version, epoch)
    return epoch
