"""Deleting old retraining run directories (``retrain.keep_last``), never one still needed.

Nothing is deleted before what is kept is verified: the run ``latest.json`` names must be
complete (:func:`storage.retraining.latest.promoted_run`, else nothing is deleted), and only complete
runs (:mod:`storage.retraining.run_complete`) count among the ``keep_last`` kept.

Never deleted: the current run, runs newer than it (a later run may have just created its
directory), the run ``latest.json`` names, the run the current one starts from while it is not
the promoted one, runs with a live lease (:mod:`storage.lease`) and the run each of those starts
from, and runs that committed a version whose files are incomplete (an interrupted copy or sync
may still be filling them: they are named in a warning and left alone).
"""

from __future__ import annotations

import logging

from storage import layout
from storage.fs import changes
from storage.fs.urls import StorageOptions
from storage.retraining.latest import promoted_run
from storage.retraining.run_complete import missing_from_run
from storage.retraining.run_dirs import (
    RunDir,
    check_run_dir_name,
    list_run_dirs,
    live_lease,
    read_run_dir,
    read_saved_config,
)
from storage.retraining.state import may_start_from

logger = logging.getLogger(__name__)


def prune_run_dirs(root: str, current: str, keep_last: int, storage_options: StorageOptions = None) -> list[str]:
    """Delete the run directories older than ``current`` that nothing keeps (module docstring); their URLs.

    Kept: the newest ``keep_last`` complete runs whose gate passed (``current`` among them if it is
    one), and everything the module docstring lists. Deleted: older complete runs beyond those,
    runs whose gate failed, and runs that never committed (leftovers of failed runs) without a
    live lease.

    Raises:
        ValueError: ``keep_last`` < 1 or ``current`` is not a run directory name.
        DataNotFound: ``latest.json`` names a missing or incomplete run (nothing is deleted then).
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 (the current run is always kept), got {keep_last}")
    check_run_dir_name(current)
    promoted = promoted_run(root, storage_options)  # verified complete before anything goes
    older = [read_run_dir(root, n, storage_options) for n in list_run_dirs(root, storage_options) if n < current]
    own = read_run_dir(root, current, storage_options)
    incomplete = {run.name for run in [*older, own] if run.version > 0 and _incomplete(run, storage_options)}
    # A run rejected by its gate is no model to keep: it never displaces a passing one.
    complete = [
        run.name
        for run in [*older, own]
        if run.version > 0 and run.name not in incomplete and may_start_from(run.url, storage_options)
    ]
    keep = set(complete[-keep_last:]) | {current} | incomplete | _in_use(older, storage_options)
    if promoted is not None:
        keep.add(promoted.name)
    if promoted is None or promoted.name != current:  # not promoted: what it starts from is still the model
        keep |= _source_of(own, storage_options)
    removed = []
    for run in older:
        if run.name in keep:
            continue
        logger.info("removing old run directory %s (version %d)", run.url, run.version)
        changes.remove_tree(run.url, storage_options)
        removed.append(run.url)
    return removed


def _incomplete(run: RunDir, storage_options: StorageOptions) -> bool:
    missing = missing_from_run(run.url, storage_options)
    if missing is not None:
        logger.warning("keeping %s as it is: %s (an interrupted copy or sync?)", run.url, missing)
    return missing is not None


def _in_use(runs: list[RunDir], storage_options: StorageOptions) -> set[str]:
    """Runs with a live lease and the run directories they initialise from."""
    used: set[str] = set()
    for run in runs:
        if live_lease(run.url, storage_options) is None:
            continue
        used |= {run.name} | _source_of(run, storage_options)
    return used


def _source_of(run: RunDir, storage_options: StorageOptions) -> set[str]:
    """The run directory ``run`` initialises from (its ``config.json``'s ``init_path``), by name: the
    path it spells may be where the tree was before it moved."""
    init = (read_saved_config(run.url, storage_options) or {}).get("init_path")
    name = init.rstrip("/").rpartition("/")[2] if isinstance(init, str) else ""
    return {name} if layout.is_run_dir_name(name) else set()


__all__ = ["prune_run_dirs"]
