"""Checkpoint steps of an iteration: write, switch, preserve, remove.

Each is idempotent (a retry rewrites the same version-``v+1`` names or finds
the work done) and retried on transient storage faults. ``switch_version`` is
the commit point.
"""

from __future__ import annotations

from pbg_core.config import ConfigSchema
from pbg_core.ports import CompleteVersion, VersionLayout
from pbg_core.session.build import version_layout
from pbg_core.session.iterations import Iteration, build_iterations, should_preserve
from storage.checkpoints import CheckpointStore
from storage.disk_checks import check_before_checkpoint, check_before_snapshot
from storage.version_check import is_complete
from tasks._policies import run_logger, storage_task
from tasks.lease import check_lease
from tasks.runs import get_run
from tasks.sessions import get_session, session_run
from tasks.validation_steps import reconcile_best


@storage_task(name="write-checkpoint", task_run_name="write checkpoint v{iteration.version}")
def write_checkpoint(handle: str, iteration: Iteration) -> int:
    """Write partitions, model, optimizer state and stats rows as the new version (once the disk has room)."""
    session = get_session(handle)
    check_before_checkpoint(session, session_run(handle).config, iteration)
    return session.write_checkpoint(iteration)


@storage_task(name="switch-version", task_run_name="switch to v{iteration.version}")
def switch_version(handle: str, iteration: Iteration) -> int:
    """Atomically point the checkpoint at the new version (refused if this run lost its lease)."""
    session = get_session(handle)
    check_lease(session.store.url)
    return session.switch_version(iteration)


@storage_task(name="preserve-version", task_run_name="preserve v{iteration.version} if due")
def preserve_version(handle: str, iteration: Iteration) -> int | None:
    """Keep an ``epoch_{N}`` snapshot when checkpoint_preservation_interval asks for one (once the disk has room)."""
    session = get_session(handle)
    epoch = should_preserve(iteration, session.settings.checkpoint_preservation_interval)
    if epoch is not None:
        check_before_snapshot(session_run(handle).config.checkpoint_path, iteration.version, epoch)
    return session.preserve_version(iteration)


@storage_task(name="remove-old-version", task_run_name="remove versions before v{iteration.version}")
def remove_old_version(handle: str, iteration: Iteration) -> int | None:
    """Delete the previous version's files now that the new pointer is durable."""
    return get_session(handle).remove_old_version(iteration)


@storage_task(name="remove-leftovers", task_run_name="remove leftovers of interrupted runs")
def remove_leftovers(run: str, committed_version: int, num_edge_chunks: int) -> list[int]:
    """Finish the commit of an interrupted run: its epoch snapshot, then delete what it left.

    First the committed version is checked complete (every file there, readable, of the
    config's shapes): a pointer ahead of its files raises, naming both versions, with nothing
    removed. A run killed after committing and before its ``preserve-version`` finished leaves
    the committed version's ``epoch_{N}`` snapshot missing or incomplete: it is copied again
    (the committed files are still there). A run killed while removing the old version (or
    right after committing, before clearing its progress) leaves older versions and progress
    that nothing references: they are deleted, except the version ``best.json`` names, which a run
    killed between its commit and ``record-best`` has not moved yet: it is moved first
    (:func:`tasks.validation_steps.reconcile_best`). ``run``: the run's handle (:mod:`tasks.runs`);
    ``num_edge_chunks``: the plan's. Returns the versions removed.
    """
    run_state = get_run(run)
    stores = run_state.stores
    layout = version_layout(run_state.config, stores.entities.load_count) if committed_version else VersionLayout({})
    kept = stores.checkpoint.check_complete(committed_version, layout)
    _preserve_if_missing(run_state.config, stores.checkpoint, kept, layout, num_edge_chunks)
    # A run killed between its commit and record-best: best.json from validation.json, before any removal.
    reconcile_best(run_state.config, stores.checkpoint, kept.version, layout)
    old = stores.checkpoint.remove_versions_before(kept)
    progress = stores.progress
    try:
        progress.clear(kept, keep_open=True)
    finally:
        progress.close()
    return old


def _preserve_if_missing(
    config: ConfigSchema, store: CheckpointStore, kept: CompleteVersion, layout: VersionLayout, num_edge_chunks: int
) -> int | None:
    """Redo the committed version's snapshot when it was due and is not complete; its epoch, or None.

    A snapshot is complete when its version file names the committed version and every file of
    that version is there and readable (its version file goes last, but a later copy or sync of
    the directory may have lost files).
    """
    iterations = build_iterations(config.num_epochs, config.edge_paths, num_edge_chunks)
    if not 0 < kept.version <= len(iterations):
        return None
    epoch = should_preserve(iterations[kept.version - 1], config.checkpoint_preservation_interval)
    if epoch is None:
        return None
    snapshot = store.snapshot_store(epoch)
    if snapshot.read_version() == kept.version and is_complete(
        snapshot.url, store.storage_options, kept.version, layout
    ):
        return None
    run_logger().warning("epoch_%d snapshot of v%d is missing or incomplete: copying it again", epoch, kept.version)
    check_before_snapshot(config.checkpoint_path, kept.version, epoch)
    store.preserve_version(kept, epoch)
    return epoch
