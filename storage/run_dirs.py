"""Run directories of scheduled retraining: one checkpoint directory per flow run under a root.

Layout under the root (any URL :mod:`storage.fs` resolves: local path, ``file://``, ``s3://``)::

    {root}/run-20260301T103005Z-0b9e1c2d/   one checkpoint directory per flow run
    {root}/latest.json                      the newest completed run (written atomically)

A run directory's name is the flow run's expected start time (UTC, so names sort in time
order) and the first 8 hex digits of its id: a retry of the same flow run maps to the same
name and resumes there. Everything here is plain storage (no Prefect): listing the run
directories, choosing the one a new run initialises from, expanding edge-path glob patterns,
pruning old runs, and reading/writing ``latest.json``.

Nothing that a live run may still read is ever deleted: the current run, runs newer than it
(a later run may have just created its directory), directories whose ``lease.json`` is held by
a live run (:mod:`storage.lease`), and the ``init_path`` of each such live run.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fsspec.core import split_protocol

from storage import layout
from storage.checkpoints import CheckpointStore
from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, changes, reads, urls
from storage.fs.urls import StorageOptions
from storage.lease import CheckpointLease
from storage.retrain_state import may_start_from

logger = logging.getLogger(__name__)

LATEST_FILE = "latest.json"
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
    """The newest run directory older than ``current`` that has a committed version (> 0).

    Runs whose quality gate failed or was never judged (:mod:`storage.retrain_state`) are skipped.

    Runs still being trained (a live lease) are skipped: their checkpoint is a moving target
    whose old versions are deleted as they train.
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


# -- pruning ----------------------------------------------------------------------------------


def prune_run_dirs(root: str, current: str, keep_last: int, storage_options: StorageOptions = None) -> list[str]:
    """Delete run directories beyond the newest ``keep_last`` committed ones; their URLs.

    Kept besides those: ``current``, every run newer than it, every run with a live lease
    and the run each of those initialises from (its ``config.json``'s ``init_path``).
    Uncommitted runs older than ``current`` without a live lease are leftovers of failed
    runs and are deleted.

    Raises:
        ValueError: ``keep_last`` < 1 or ``current`` is not a run directory name.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 (the current run is always kept), got {keep_last}")
    check_run_dir_name(current)
    older = [read_run_dir(root, n, storage_options) for n in list_run_dirs(root, storage_options) if n < current]
    own = read_run_dir(root, current, storage_options)
    # A run rejected by its gate is no model to keep: it never displaces a passing one.
    committed = [run.name for run in [*older, own] if run.version > 0 and may_start_from(run.url, storage_options)]
    keep = set(committed[-keep_last:]) | {current} | _in_use(root, older, storage_options)
    removed = []
    for run in older:
        if run.name in keep:
            continue
        logger.info("removing old run directory %s (version %d)", run.url, run.version)
        changes.remove_tree(run.url, storage_options)
        removed.append(run.url)
    return removed


def _in_use(root: str, runs: list[RunDir], storage_options: StorageOptions) -> set[str]:
    """Runs with a live lease and the run directories they initialise from."""
    used: set[str] = set()
    for run in runs:
        if live_lease(run.url, storage_options) is None:
            continue
        used.add(run.name)
        saved = read_saved_config(run.url, storage_options) or {}
        init = saved.get("init_path")
        source = run_name_in(root, init) if isinstance(init, str) else None
        if source is not None:
            used.add(source)
    return used


# -- latest.json ------------------------------------------------------------------------------


def read_latest(root: str, storage_options: StorageOptions = None) -> dict[str, Any] | None:
    """The content of ``{root}/latest.json``, or None if there is none.

    Raises:
        BadDataError: the file is not a JSON object naming a run directory.
    """
    url = urls.join_url(root, LATEST_FILE)
    try:
        text = reads.read_text(url, storage_options)
    except DataNotFound:
        return None
    try:
        latest = json.loads(text)
    except json.JSONDecodeError as err:
        raise BadDataError(url, f"invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    if not isinstance(latest, dict) or not is_run_dir_name(str(latest.get("run", ""))):
        raise BadDataError(
            url,
            'expected a JSON object {"run": "run-...", "checkpoint_path": ..., "version": ..., '
            f'"completed_at": ...}}, got {text[:200]!r}',
        )
    return latest


def write_latest(
    root: str, run: RunDir, storage_options: StorageOptions = None, completed_at: datetime | None = None
) -> dict[str, Any] | None:
    """Point ``{root}/latest.json`` at ``run``; the content written, or None if left as it was.

    Never moves backwards: if ``latest.json`` already names a newer run (one that started
    later and finished first), it is kept.

    Raises:
        DataNotFound: ``run`` has no committed version (nothing to point at).
    """
    if run.version <= 0:
        raise DataNotFound(
            run.url,
            f"no committed version ({layout.VERSION_FILE} is 0 or missing); "
            "expected a run that committed at least one version",
        )
    current = read_latest(root, storage_options)
    if current is not None and current["run"] > run.name:
        logger.info("%s names the newer run %s: not replaced by %s", LATEST_FILE, current["run"], run.name)
        return None
    when = (completed_at or datetime.now(UTC)).astimezone(UTC)
    latest = {
        "run": run.name,
        "checkpoint_path": run.url,
        "version": run.version,
        "completed_at": when.isoformat(timespec="seconds"),
    }
    atomic.write_text_atomic(urls.join_url(root, LATEST_FILE), json.dumps(latest, indent=2) + "\n", storage_options)
    return latest


__all__ = [
    "LATEST_FILE",
    "RunDir",
    "check_run_dir_name",
    "expand_edge_paths",
    "find_previous_run",
    "has_glob",
    "is_run_dir_name",
    "list_run_dirs",
    "live_lease",
    "prune_run_dirs",
    "read_latest",
    "read_run_dir",
    "read_saved_config",
    "run_dir_name",
    "run_dir_url",
    "run_name_in",
    "write_latest",
]
