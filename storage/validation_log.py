"""``validation.json``: one row per validated checkpoint version, keyed by version.

Format (docs/formats.md, "validation.json")::

    {"format": 1, "rows": [{"version": 7, "epoch": 14, "mrr": 0.94, "r1": 0.9, "r10": 0.99,
                            "count": 661, "sampled": false, "seconds": 0.4, "setup": "..."}]}

A row is written *before* its version is committed (the validation ranks the written files),
so a run killed right after the commit never loses it; a row of a version above the committed
one belongs to an attempt that never committed and is ignored by every decision
(:func:`pbg_core.evaluation.early_stopping.comparable`) and replaced when that version is
written again: writing a row replaces any row of the same version, so a retry never duplicates
one. The file is rewritten whole, atomically (:func:`storage.fs.atomic.write_text_atomic`),
only by the run holding the checkpoint's lease.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pbg_core.evaluation.early_stopping import ValidationRow
from storage import layout
from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, reads, urls
from storage.fs.urls import StorageOptions

FORMAT = 1
_FIELDS = {field.name: field.type for field in dataclasses.fields(ValidationRow)}


class ValidationLog:
    """The validation rows of one checkpoint directory.

    Args:
        checkpoint_url: The checkpoint directory.
        storage_options: Filesystem keyword arguments.
    """

    def __init__(self, checkpoint_url: str, storage_options: StorageOptions = None) -> None:
        self.url = urls.join_url(checkpoint_url, layout.VALIDATION_FILE)
        self.storage_options = storage_options

    def read(self) -> list[ValidationRow]:
        """Every row, by version ([] when the file does not exist).

        Raises:
            BadDataError: the file is not the format above (names the file and what is wrong).
        """
        try:
            found = reads.read_json(self.url, self.storage_options)
        except DataNotFound:
            return []
        return parse_rows(found, self.url)

    def write(self, row: ValidationRow) -> None:
        """Store ``row``, replacing the row of the same version."""
        merged = {r.version: r for r in self.read()}
        merged[row.version] = row
        data = {"format": FORMAT, "rows": [dataclasses.asdict(merged[v]) for v in sorted(merged)]}
        atomic.write_text_atomic(self.url, json.dumps(data, indent=1) + "\n", self.storage_options)


def parse_rows(found: reads.JsonFile, url: str) -> list[ValidationRow]:
    """The rows of a ``validation.json`` file's content.

    Raises:
        BadDataError: another format, or a row without the fields of :class:`ValidationRow`.
    """
    data, text = found
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("rows"), list):
        raise BadDataError(url, f'expected {{"format": {FORMAT}, "rows": [...]}}, got {text[:80]!r}')
    return sorted((row_from_json(item, url) for item in data["rows"]), key=lambda r: r.version)


def row_from_json(item: Any, url: str) -> ValidationRow:
    """One row from its JSON object.

    Raises:
        BadDataError: a field is missing or of the wrong type (named), or an unknown one is there.
    """
    if not isinstance(item, dict) or set(item) != set(_FIELDS):
        keys = sorted(item) if isinstance(item, dict) else type(item).__name__
        raise BadDataError(url, f"a row must have exactly the fields {', '.join(_FIELDS)}; got {keys}")
    for name, kind in _FIELDS.items():
        value = item[name]
        ok = {
            "int": isinstance(value, int) and not isinstance(value, bool),
            "float": isinstance(value, int | float) and not isinstance(value, bool),
            "bool": isinstance(value, bool),
            "str": isinstance(value, str),
        }[str(kind)]
        if not ok:
            raise BadDataError(url, f"row field {name!r} must be {kind}, got {value!r}")
    return ValidationRow(
        version=item["version"],
        epoch=item["epoch"],
        mrr=float(item["mrr"]),
        r1=float(item["r1"]),
        r10=float(item["r10"]),
        count=item["count"],
        sampled=item["sampled"],
        seconds=float(item["seconds"]),
        setup=item["setup"],
    )
