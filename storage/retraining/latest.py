"""``{root}/latest.json``: the promoted retraining run, and the run the next one starts from.

``latest.json`` names the newest run whose quality gate passed (``{"run", "checkpoint_path",
"version", "completed_at"}``, written atomically). It is read by its ``run`` name under the root
it sits in, never by the ``checkpoint_path`` it spells, so the whole tree may move.

Its absence is the only "first run": a ``latest.json`` that names a run directory that is gone
or incomplete (:func:`storage.retraining.run_complete.missing_from_run`) is an error (:func:`promoted_run`)
raised before a new run imports or writes anything, so a deleted or half-synced model is never
silently replaced by one trained from nothing that passes its gate as a "first run".
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from storage import layout
from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, reads, urls
from storage.fs.urls import StorageOptions
from storage.retraining.run_complete import missing_from_run
from storage.retraining.run_dirs import RunDir, find_previous_run, read_run_dir, run_dir_url

logger = logging.getLogger(__name__)


def read_latest(root: str, storage_options: StorageOptions = None) -> dict[str, Any] | None:
    """The content of ``{root}/latest.json``, or None if there is none.

    Raises:
        BadDataError: the file is not a JSON object naming a run directory.
    """
    url = urls.join_url(root, layout.LATEST_FILE)
    try:
        latest, text = reads.read_json(url, storage_options)
    except DataNotFound:
        return None
    if not isinstance(latest, dict) or not layout.is_run_dir_name(str(latest.get("run", ""))):
        raise BadDataError(
            url,
            'expected a JSON object {"run": "run-...", "checkpoint_path": ..., "version": ..., '
            f'"completed_at": ...}}, got {text[:200]!r}',
        )
    return latest


def promoted_run(root: str, storage_options: StorageOptions = None) -> RunDir | None:
    """The run ``{root}/latest.json`` names, checked complete; None when there is no ``latest.json``.

    Raises:
        DataNotFound: ``latest.json`` names a run directory that does not exist under ``root`` or
            is incomplete (names the file, the run and what is missing).
        BadDataError: ``latest.json`` is not such a file.
    """
    latest = read_latest(root, storage_options)
    if latest is None:
        return None
    name = str(latest["run"])
    url = run_dir_url(root, name)
    missing = missing_from_run(url, storage_options)
    if missing is not None:
        raise DataNotFound(
            urls.join_url(root, layout.LATEST_FILE),
            f"names the promoted run {name}, but {url}: {missing}. Training from scratch now would replace "
            "that model; restore the directory, point latest.json at another complete run, or delete "
            "latest.json to start over from nothing (nothing was imported or written)",
        )
    return read_run_dir(root, name, storage_options)


def starting_run(root: str, current: str, storage_options: StorageOptions = None) -> RunDir | None:
    """The run a new run ``current`` starts from (:func:`storage.retraining.run_dirs.find_previous_run`), after checking
    ``latest.json`` (:func:`promoted_run`); None only when there is no ``latest.json`` (a first run).

    Raises:
        DataNotFound: ``latest.json`` names a missing or incomplete run, or it names one while no
            earlier run is there to start from.
    """
    promoted = promoted_run(root, storage_options)
    previous = find_previous_run(root, current, storage_options)
    if previous is None and promoted is not None and promoted.name != current:
        raise DataNotFound(
            urls.join_url(root, layout.LATEST_FILE),
            f"names the promoted run {promoted.name}, but no complete run older than this run {current} "
            f"is left to start from under {root}; give this run a later start, or delete latest.json to "
            "start over from nothing (nothing was imported or written)",
        )
    return previous


def write_latest(
    root: str, run: RunDir, storage_options: StorageOptions = None, completed_at: datetime | None = None
) -> dict[str, Any] | None:
    """Point ``{root}/latest.json`` at ``run``; the content written, or None if left as it was.

    Never moves backwards: if ``latest.json`` already names a newer run (one that started
    later and finished first), it is kept.

    Raises:
        DataNotFound: ``run`` is not complete (nothing committed, or a file of its version missing).
    """
    missing = missing_from_run(run.url, storage_options)
    if missing is not None:
        raise DataNotFound(run.url, f"not promoted to {layout.LATEST_FILE}: {missing}")
    current = read_latest(root, storage_options)
    if current is not None and current["run"] > run.name:
        logger.info("%s names the newer run %s: not replaced by %s", layout.LATEST_FILE, current["run"], run.name)
        return None
    when = (completed_at or datetime.now(UTC)).astimezone(UTC)
    latest = {
        "run": run.name,
        "checkpoint_path": run.url,
        "version": run.version,
        "completed_at": when.isoformat(timespec="seconds"),
    }
    atomic.write_text_atomic(
        urls.join_url(root, layout.LATEST_FILE), json.dumps(latest, indent=2) + "\n", storage_options
    )
    return latest


__all__ = ["promoted_run", "read_latest", "starting_run", "write_latest"]
