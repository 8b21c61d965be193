"""``best.json``: the best validated checkpoint version, a second pointer beside ``checkpoint_version.txt``.

Format (docs/formats.md, "best.json")::

    {"format": 1, "metric": "mrr", "value": 0.9412,
     "row": {"version": 7, "epoch": 14, "mrr": 0.9412, ...}}   (a row of validation.json)

This module is the one owner of the file: everything that reads it, writes it, or removes
checkpoint files in a directory that may hold one goes through here. Its invariants:

- ``best.json`` names a version only after that version is committed (``<=`` the version
  ``checkpoint_version.txt`` says) and found complete: :func:`write_best` takes the store's
  :class:`~pbg_core.ports.CompleteVersion` evidence of it;
- nothing it names is ever removed: :func:`pinned_versions` is what
  :meth:`storage.checkpoints.CheckpointStore.remove_versions_before` keeps besides the version
  it is given (a ``best.json`` it cannot read stops the removal, naming the file);
- it is rewritten atomically (:func:`storage.fs.atomic.write_text_atomic`): a kill leaves the
  old pointer or the new one, and the version the old one named is still there, because it is
  removed only by a later removal, which reads the new one.

:func:`choose_best` is both the normal step after a commit and the reconciliation of a run
killed between its commit and that step: the best complete version among the rows of
``validation.json`` up to the committed version (:mod:`pbg_core.evaluation.early_stopping`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from pbg_core.evaluation.early_stopping import ValidationRow, comparable
from pbg_core.ports import CompleteVersion, VersionLayout
from storage import layout
from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, reads, urls
from storage.fs.urls import StorageOptions
from storage.validation_log import row_from_json
from storage.version_check import IncompleteVersionError, check_complete

FORMAT = 1
BEST = "best"  # --version best: the version best.json names
VersionWanted = int | Literal["best"]  # a version number, or the best one
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BestVersion:
    """What ``best.json`` says: the best version's validation row and the metric it is best by."""

    metric: str
    row: ValidationRow

    @property
    def version(self) -> int:
        """The checkpoint version it names."""
        return self.row.version

    @property
    def value(self) -> float:
        """Its value of ``metric``."""
        return self.row.value(self.metric)


def best_url(checkpoint_url: str) -> str:
    """Where the ``best.json`` of a checkpoint directory is."""
    return urls.join_url(checkpoint_url, layout.BEST_FILE)


def read_best(checkpoint_url: str, storage_options: StorageOptions = None) -> BestVersion | None:
    """What the directory's ``best.json`` says; None when there is none.

    Raises:
        BadDataError: the file is not the format above (names the file and what is wrong).
    """
    url = best_url(checkpoint_url)
    try:
        data, text = reads.read_json(url, storage_options)
    except DataNotFound:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("metric"), str):
        raise BadDataError(url, f'expected {{"format": {FORMAT}, "metric": ..., "row": {{...}}}}, got {text[:80]!r}')
    best = BestVersion(metric=data["metric"], row=row_from_json(data.get("row"), url))
    try:
        best.row.value(best.metric)
    except ValueError as err:
        raise BadDataError(url, str(err)) from None
    return best


def pinned_versions(checkpoint_url: str, storage_options: StorageOptions = None) -> frozenset[int]:
    """The versions no removal may delete: the one ``best.json`` names (none without the file).

    Raises:
        BadDataError: ``best.json`` cannot be read: nothing may be removed until it is fixed.
    """
    best = read_best(checkpoint_url, storage_options)
    return frozenset() if best is None else frozenset({best.version})


def write_best(
    kept: CompleteVersion, storage_options: StorageOptions, committed: int, row: ValidationRow, metric: str
) -> BestVersion:
    """Point ``best.json`` at ``row``'s version, given evidence it is complete and committed.

    Raises:
        ValueError: the evidence is of another version, or the version is not committed yet.
    """
    if kept.version != row.version or not 0 < row.version <= committed:
        raise ValueError(
            f"{best_url(kept.url)}: best.json may name only a committed, complete version; got v{row.version} "
            f"(evidence for v{kept.version}, committed v{committed})"
        )
    best = BestVersion(metric=metric, row=row)
    text = json.dumps({"format": FORMAT, "metric": metric, "value": best.value, "row": asdict(row)}, indent=1)
    atomic.write_text_atomic(best_url(kept.url), text + "\n", storage_options)
    return best


def choose_best(
    checkpoint_url: str,
    storage_options: StorageOptions,
    rows: Sequence[ValidationRow],
    choice: tuple[str, str],
    committed: int,
    expected: VersionLayout,
) -> BestVersion | None:
    """Point ``best.json`` at the best complete version among ``rows`` up to ``committed``; what it says after.

    ``choice``: (metric, setup): rows of another setup are not compared. The rows are tried from
    the best value down and the first version found complete is taken (one whose files are gone
    is skipped, with a warning in its place: a rerun of validation cannot bring them back).
    Without any such row, ``best.json`` is left as it is (another setup's best stays pinned).

    Raises:
        BadDataError: the current ``best.json`` cannot be read.
    """
    metric, setup = choice
    current = read_best(checkpoint_url, storage_options)
    numbers = [row for row in comparable(rows, setup, committed) if row.value(metric) == row.value(metric)]
    for row in sorted(numbers, key=lambda r: (-r.value(metric), r.version)):
        if current is not None and current.metric == metric and current.row == row:
            return current
        try:
            kept = check_complete(checkpoint_url, storage_options, row.version, expected)
        except IncompleteVersionError as err:
            logger.warning("v%d cannot be the best version: %s", row.version, err)
            continue
        return write_best(kept, storage_options, committed, row, metric)
    return current


def resolve_best(checkpoint_url: str, storage_options: StorageOptions, committed: int) -> int:
    """The version ``best.json`` names, for ``--version best``.

    Raises:
        DataNotFound: no ``best.json`` (one line: train with a validation section first).
        BadDataError: it names a version above the committed one (the pointer was edited or copied).
    """
    best = read_best(checkpoint_url, storage_options)
    if best is None:
        raise DataNotFound(
            checkpoint_url,
            f"no {layout.BEST_FILE} here: train with a validation section first (docs/quality.md), or give a version number",
        )
    if best.version > committed:
        raise BadDataError(
            best_url(checkpoint_url),
            f"names v{best.version}, above the committed version {committed} (checkpoint_version.txt)",
        )
    return best.version
