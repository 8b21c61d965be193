"""Run directories of scheduled retraining: one checkpoint directory per flow run under a root.

Layout under the root (any URL :mod:`storage.fs` resolves: local path, ``file://``, ``s3://``)::

    {root}/run-20260301T103005Z-0b9e1c2d/   one checkpoint directory per flow run
    {root}/latest.json                      the newest promoted run (storage.latest_run)
    {root}/lease.json                       held by the retraining run at work (storage.lease)

A run directory's name is the flow run's expected start time (UTC, so names sort in time
order) and the first 8 hex digits of its id: a retry of the same flow run maps to the same
name and resumes there. Everything here is plain storage (no Prefect): naming and listing the
run directories, choosing the one a new run initialises from, and expanding edge-path glob
patterns. ``latest.json`` is :mod:`storage.latest_run`'s, deleting old runs :mod:`storage.run_pruning`'s.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fsspec.core import split_protocol

from storage.checkpoints import CheckpointStore
from storage.errors import DataNotFound
from storage.fs import reads, urls
from storage.fs.urls import StorageOptions
from storage.lease import CheckpointLease
from storage.retrain_state import may_start_from
from storage.run_complete import missing_from_run

logger = logging.getLogger(__name__)

RUN_DIR_RE = re.compile(r"^run-(\d{8}T\d{6}Z)-([0-9a-f]{8})$")
_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class RunDir:
    """One run directory: its base name, full URL and committed checkpoint version."""

    name: str
    url: str
    version: int


# -- names ---------------------------------------------------------------------------------


def run_dir_name(flow_run_id: str, expected_start: datetime) -> str:
    """``run-{YYYYmmddTHHMMSSZ}-{first 8 hex of the flow run id}``.

    Args:
        flow_run_id: The flow run's id (a UUID; dashes are ignored).
        expected_start: The flow run's expected start time, timezone-aware (converted to UTC).

    Raises:
        ValueError: a naive datetime, or an id that does not start with 8 hex digits.
    """
    if expected_start.tzinfo is None or expected_start.utcoffset() is None:
        raise ValueError(f"expected_start must be timezone-aware (e.g. UTC), got naive {expected_start.isoformat()}")
    digits = flow_run_id.replace("-", "").lower()[:8]
    if len(digits) != 8 or any(c not in "0123456789abcdef" for c in digits):
        raise ValueError(f"flow_run_id must start with 8 hex digits (a UUID), got {flow_run_id!r}")
    return f"run-{expected_start.astimezone(UTC).strftime(_TIME_FORMAT)}-{digits}"


def is_run_dir_name(name: str) -> bool:
    """Whether ``name`` has the form of :func:`run_dir_name`."""
    return RUN_DIR_RE.match(name) is not None


def check_run_dir_name(name: str) -> None:
    """Raise ValueError unless ``name`` is a run directory name.

    Raises:
        ValueError: naming ``name`` and the expected form.
    """
    if not is_run_dir_name(name):
        raise ValueError(
            f"run key {name!r} is not a run directory name; expected run-YYYYmmddTHHMMSSZ-<8 hex>, "
            "e.g. 'run-20260301T103005Z-0b9e1c2d'"
        )


def run_dir_url(root: str, name: str) -> str:
    """URL of run directory ``name`` under ``root``."""
    check_run_dir_name(name)
    return urls.join_url(root, name)


def run_name_in(root: str, url: str) -> str | None:
    """The run directory name if ``url`` is a run directory directly under ``root``, else None."""
    name = url.rstrip("/").rpartition("/")[2]
    if not is_run_dir_name(name) or url.rstrip("/") != urls.join_url(root, name).rstrip("/"):
        return None
    return name


# -- listing and choosing ----------------------------------------------------------------------


def list_run_dirs(root: str, storage_options: StorageOptions = None) -> list[str]:
    """Names of the run directories under ``root``, oldest first ([] if ``root`` does not exist)."""
    return [name for name in reads.listdir(root, storage_options) if is_run_dir_name(name)]


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

    Runs whose quality gate failed or was never judged (:mod:`storage.retrain_state`) are skipped.
    So are runs whose committed version lacks a file (:mod:`storage.run_complete`; with a warning),
    and runs still being trained (a live lease): their checkpoint is a moving target whose old
    versions are deleted as they train. :func:`storage.latest_run.starting_run` adds what
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


def has_glob(path: str) -> bool:
    """Whether ``path`` contains a glob character (``*``, ``?``, ``[``)."""
    return any(c in _GLOB_CHARS for c in path)


def expand_edge_paths(patterns: list[str], storage_options: StorageOptions = None) -> list[str]:
    """Each pattern replaced by the directories it matches (sorted); plain paths kept as they are.

    Matches keep the pattern's scheme (``s3://bucket/...`` stays an ``s3://`` URL). Only
    directories count: an edge path is a directory of bucket files.

    Raises:
        DataNotFound: a pattern matches no directory (names the pattern).
    """
    out: list[str] = []
    for pattern in patterns:
        if not has_glob(pattern):
            out.append(pattern)
            continue
        filesystem, path = urls.resolve(pattern, storage_options)
        with urls.translate_errors(pattern):
            found = filesystem.glob(path, detail=True)
        matches = sorted(p.rstrip("/") for p, info in found.items() if info.get("type") == "directory")
        if not matches:
            raise DataNotFound(
                pattern,
                "this edge_paths pattern matches no directory; expected at least one "
                "edge directory (written by `pbg import`) to match",
            )
        out.extend(_as_url(pattern, match) for match in matches)
    return out


def _as_url(pattern: str, match: str) -> str:
    """``match`` (a path of the pattern's filesystem) in the pattern's own form."""
    protocol = split_protocol(pattern)[0]
    return f"{protocol}://{match}" if protocol else match


__all__ = [
    "RunDir",
    "check_run_dir_name",
    "expand_edge_paths",
    "find_previous_run",
    "has_glob",
    "is_run_dir_name",
    "list_run_dirs",
    "live_lease",
    "read_run_dir",
    "read_saved_config",
    "run_dir_name",
    "run_dir_url",
    "run_name_in",
]
