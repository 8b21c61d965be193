"""``training_stats.json``: one JSON object per line, keyed by bucket ``index``.

The rows' fields are in docs/formats.md, "training_stats.json".

PBG appends lines before committing a version, so a crash and resume duplicates
them. Here every row carries its global bucket ``index`` and writing a row
*replaces* any stored row of the same key, so a retried iteration rewrites its rows
instead of adding copies. The file is kept sorted by index and rewritten atomically.

PBG also writes, after an iteration with evaluation, a summary line
``{..., "index": i, "eval_stats_chunk_avg": {...}}`` whose index equals its last
bucket's. Summary rows are therefore keyed separately from bucket rows, and
sort after the bucket row of the same index, exactly where PBG puts them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from storage import layout
from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, reads, urls
from storage.fs.urls import StorageOptions

SUMMARY_KEY = "eval_stats_chunk_avg"

RowKey = tuple[int, int]


class StatsLog:
    """The stats file of one checkpoint directory.

    Args:
        checkpoint_url: The checkpoint directory.
        storage_options: Filesystem keyword arguments.
    """

    def __init__(self, checkpoint_url: str, storage_options: StorageOptions = None) -> None:
        self.url = urls.join_url(checkpoint_url, layout.STATS_FILE)
        self.storage_options = storage_options

    def read(self) -> list[dict[str, Any]]:
        """Every row, in file order ([] when the file does not exist).

        Raises:
            BadDataError: a line is not a JSON object with an int ``index`` (names the line number).
        """
        try:
            text = reads.read_text(self.url, self.storage_options)
        except DataNotFound:
            return []
        rows = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise BadDataError(self.url, f"line {lineno}: invalid JSON ({err.msg}): {line[:80]!r}") from None
            if not isinstance(row, dict) or not _has_int_index(row):
                raise BadDataError(
                    self.url, f"line {lineno}: expected a JSON object with an int 'index', got {line[:80]!r}"
                )
            rows.append(row)
        return rows

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Store ``rows``: a row replaces a stored row with the same key; the file stays sorted.

        Raises:
            ValueError: a row has no int ``index``.
        """
        for row in rows:
            if not _has_int_index(row):
                raise ValueError(f"stats rows need an int 'index', got {row!r}")
        merged = {_key(row): row for row in self.read()}
        merged.update({_key(row): row for row in rows})
        lines = [json.dumps(merged[key]) + "\n" for key in sorted(merged)]
        atomic.write_text_atomic(self.url, "".join(lines), self.storage_options)


def _has_int_index(row: dict[str, Any]) -> bool:
    index = row.get("index")
    return isinstance(index, int) and not isinstance(index, bool)


def _key(row: dict[str, Any]) -> RowKey:
    """(index, 0) for a bucket row, (index, 1) for an iteration summary row."""
    return (row["index"], 1 if SUMMARY_KEY in row else 0)
