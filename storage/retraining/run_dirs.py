"""Run directories of scheduled retraining: one checkpoint directory per flow run under a root.

Layout under the root (any URL :mod:`storage.fs` resolves: local path, ``file://``, ``s3://``)::

    {root}/run-20260301T103005Z-0b9e1c2d/   one checkpoint directory per flow run
    {root}/latest.json                      the newest promoted run (storage.retraining.latest)
    {root}/lease.json                       held by the retraining run at work (storage.lease)

A run directory's name (:func:`storage.layout.run_dir_name`) is the flow run's expected start time (UTC, so names sort in time
order) and the first 8 hex digits of its id: a retry of the same flow run maps to the same
name and resumes there. Everything here is plain storage (no Prefect): naming and listing the
run directories, choosing the one a new run initialises from, and expanding edge-path glob
patterns. ``latest.json`` is :mod:`storage.retraining.latest`'s, deleting old runs
:mod:`storage.retraining.pruning`'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from storage import layout
from storage.checkpoints import CheckpointStore
from storage.errors import DataNotFound
from storage.fs import globs, reads, urls
from storage.fs.urls import StorageOptions
from storage.lease import CheckpointLease
from storage.retraining.run_complete import missing_from_run
from storage.retraining.state import may_start_from

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunDir:
    """One run directory: its base name, full URL and committed checkpoint version."""

    name: str
    url: str
    version: int


# -- names (layout.run_dir_name makes them) -------------------------------------------------


def check_run_dir_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a run directory name.

    Raises:
        ValueError: naming ``name`` and the expected form.
    """
    if not layout.is_run_dir_name(name):
        raise ValueError(
            f"run key {name!r} is not a run directory name; expected {layout.RUN_DIR_FORM}, "
            "e.g. 'run-20260301T103005Z-0b9e1c2d'"
        )


def run_dir_url(root: str, name: str) -> str:
    """URL of run directory ``name`` under ``root``."""
    check_run_dir_name(name)
    return urls.join_url(root, name)


def run_name_in(root: str, url: str) -> str | None:
    """The run directory name if ``url`` is a run directory directly under ``root``, else None."""
    name = url.rstrip("/").rpartition("/")[2]
    if not layout.is_run_dir_name(name) or url.rstrip("/") != urls.join_url(root, name).rstrip("/"):
        return None
    return name


# -- listing and choosing ----------------------------------------------------------------------


def list_run_dirs(root: str, storage_options: StorageOptions = None) -> list[str]:
    """Names of the run directories under ``root``, oldest first ([] if ``root`` does not exist)."""
    return [name for name in reads.listdir(root, storage_options) if layout.is_run_dir_name(name)]


def read_run_dir(root: str, name: str, storage_options: StorageOptions = None) -> RunDir:
    """The run directory ``name`` with its committed version (0 when nothing is committed)."""
    url = run_dir_url(root, name)
    return RunDir(name=name, url=url, version=CheckpointStore(url, storage_options).read_version())


def live_lease(url: str, storage_options: StorageOptions = None) -> str | None:
    """Who holds ``url``'s lease if a live run does (unexpired, process not known dead), else None."""
    holder = CheckpointLease(url, run="retrain", storage_options=storage_options).read()
    if holder is None or holder.expires_at <= datetime.now(UTC).timestamp() or holder.is_dead_here():
        return None
    return holder.describe()


def find_previous_run(root: str, current: str, storage_options: StorageOptions = None) -> RunDir | None:
    """The newest run directory older than ``current`` that has a complete committed version.

    Runs whose quality gate failed or was never judged (:mod:`storage.retraining.state`) are skipped.
    So are runs whose committed version lacks a file (:mod:`storage.retraining.run_complete`; with a warning),
    and runs still being trained (a live lease): their checkpoint is a moving target whose old
    versions are deleted as they train. :func:`storage.retraining.latest.starting_run` adds what
    ``latest.json`` requires.
    """
    check_run_dir_name(current)
    for name in reversed(list_run_dirs(root, storage_options)):
        if name >= current:
            continue
        run = read_run_dir(root, name, storage_options)
        if run.version == 0:
            continue
        if not may_start_from(run.url, storage_options):
            logger.info("not initialising from %s: its quality gate did not pass", run.url)
            continue
        holder = live_lease(run.url, storage_options)
        if holder is not None:
            logger.info("not initialising from %s: it is still being trained by %s", run.url, holder)
            continue
        missing = missing_from_run(run.url, storage_options)
        if missing is not None:
            logger.warning("not initialising from %s: %s", run.url, missing)
            continue
        return run
    return None


def read_saved_config(url: str, storage_options: StorageOptions = None) -> dict[str, Any] | None:
    """The ``config.json`` of checkpoint directory ``url``, or None if it has none yet.

    Raises:
        BadDataError: the file is not a JSON object.
    """
    try:
        return CheckpointStore(url, storage_options).load_config()
    except DataNotFound:
        return None


# -- edge path patterns --------------------------------------------------------------------------


def expand_edge_paths(patterns: list[str], storage_options: StorageOptions = None) -> list[str]:
    """Each pattern replaced by the directories it matches (sorted); plain paths kept as they are.

    Matches keep the pattern's form (:mod:`storage.fs.globs`: ``s3://bucket/...`` stays an
    ``s3://`` URL). Only directories count: an edge path is a directory of bucket files.

    Raises:
        DataNotFound: a pattern matches no directory (names the pattern).
    """
    out: list[str] = []
    for pattern in patterns:
        if not globs.has_glob(pattern):
            out.append(pattern)
            continue
        matches = globs.glob(pattern, "directory", storage_options)
        if not matches:
            raise DataNotFound(
                pattern,
                "this edge_paths pattern matches no directory; expected at least one "
                "edge directory (written by `pbg import`) to match",
            )
        out.extend(matches)
    return out


__all__ = [
    "RunDir",
    "check_run_dir_name",
    "expand_edge_paths",
    "find_previous_run",
    "list_run_dirs",
    "live_lease",
    "read_run_dir",
    "read_saved_config",
    "run_dir_url",
    "run_name_in",
]
