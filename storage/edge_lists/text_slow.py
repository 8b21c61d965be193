"""The slow path of a delimited text input: Python, line by line, the authority on a malformed line.

It reads a block the fast path (:mod:`storage.edge_lists.text_fast`) would not judge, numbered
from the block's first line, and whole files where the fast path cannot start (column names for
a text file, no edge at all). What a line means is in :mod:`storage.edge_lists.parse`.
"""

from __future__ import annotations

import io
import math
from collections.abc import Generator, Iterable, Iterator

import numpy as np
import pyarrow as pa

from storage.edge_lists.parse import Columns, RawBatch, ReadSpec, expected_relations, no_rows, open_binary
from storage.errors import BadDataError

SLOW_BATCH_ROWS = 65_536  # rows per batch on the slow path


class _SlowBuffers:
    """Column lists of the slow path, turned into a RawBatch when full."""

    def __init__(self, columns: Columns, numbered: bool) -> None:
        self.with_lhs, self.with_rhs = columns.lhs is not None, columns.rhs is not None
        self.with_rel, self.with_weight = columns.rel is not None, columns.weight is not None
        self.numbered = numbered
        self.reset()

    def reset(self) -> None:
        self.lhs: list[str] = []
        self.rhs: list[str] = []
        self.rel: list[str] = []
        self.weight: list[float] = []
        self.numbers: list[int] = []
        self.lines = self.blank = 0
        self.bad: list[str] = []

    def take(self) -> RawBatch:
        batch = RawBatch(
            pa.array(self.lhs, pa.string()) if self.with_lhs else None,
            pa.array(self.rhs, pa.string()) if self.with_rhs else None,
            pa.array(self.rel, pa.string()) if self.with_rel else None,
            np.array(self.weight, dtype=np.float32) if self.with_weight else None,
            lines=self.lines,
            blank=self.blank,
            bad=self.bad,
            numbers=np.array(self.numbers, dtype=np.int64) if self.numbered else None,
        )
        self.reset()
        return batch


def slow_batches(path: str, url: str, spec: ReadSpec, delimiter: str) -> Iterator[RawBatch]:
    """Batches of a delimited text file read line by line; the authority on malformed lines.

    Raises:
        BadDataError: the first malformed line (unless ``spec.skip_bad_lines``), or no edge at all.
    """
    with open_binary(path, url) as lines:
        edges = yield from _slow_lines(lines, 1, url, spec, delimiter)
    if edges == 0:
        raise BadDataError(url, no_rows(spec, parquet=False))


def slow_block(block: bytes, first_line: int, url: str, spec: ReadSpec, delimiter: str) -> Iterator[RawBatch]:
    """Batches of one block of whole lines whose first line is line ``first_line`` of ``url``.

    Raises:
        BadDataError: the first malformed line (unless ``spec.skip_bad_lines``).
    """
    yield from _slow_lines(io.BytesIO(block), first_line, url, spec, delimiter)


def _slow_lines(
    lines: Iterable[bytes], first_line: int, url: str, spec: ReadSpec, delimiter: str
) -> Generator[RawBatch, None, int]:
    """Batches of ``lines`` (numbered from ``first_line``); returns the number of edges."""
    sep = delimiter.encode("utf-8")
    buffers = _SlowBuffers(spec.columns, spec.numbered)
    edges = 0
    # The column-count hint is for the file's first data line only.
    first_data_line = 0 if first_line == 1 else -1
    for number, raw in enumerate(lines, start=first_line):
        buffers.lines += 1
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            buffers.blank += 1
            continue
        first_data_line = first_data_line or number
        fields, problem = _parse_line(line.split(sep), spec, number == first_data_line)
        if problem is None and fields is None:
            buffers.blank += 1
            continue
        if problem is not None:
            shown = line.decode("utf-8", "replace")[:100]
            problem = f"line {number}: {problem}: {shown!r}"
            if not spec.skip_bad_lines:
                raise BadDataError(url, problem)
            buffers.bad.append(problem)
            continue
        lhs, rhs, rel, weight = fields  # type: ignore[misc]  # fields is a 4-tuple when no problem was found (checked above)
        if lhs is not None:
            buffers.lhs.append(lhs)
        if rhs is not None:
            buffers.rhs.append(rhs)
        if rel is not None:
            buffers.rel.append(rel)
        if weight is not None:
            buffers.weight.append(weight)
        if spec.numbered:
            buffers.numbers.append(number)
        edges += 1
        if edges % SLOW_BATCH_ROWS == 0:
            yield buffers.take()
    yield buffers.take()
    return edges


def _parse_line(
    words: list[bytes], spec: ReadSpec, first: bool
) -> tuple[tuple[str | None, str | None, str | None, float | None] | None, str | None]:
    """(fields, None) for an edge, (None, None) for a blank line, (None, problem) if malformed."""
    columns, relations = spec.columns, spec.relations
    if len(words) < columns.needed:
        hint = " (is a column index or the delimiter wrong?)" if first else ""
        return None, (
            f"expected at least {columns.needed} columns ({columns.describe(spec.labels)}, 0-based) "
            f"but found {len(words)}{hint}"
        )
    values: dict[str, str] = {}
    for name, col in columns.ids():
        try:
            values[name] = words[col].decode("utf-8")  # type: ignore[index]  # the column indexes were validated against the line's width above
        except UnicodeDecodeError as err:
            return None, f"expected UTF-8 text in column {col} ({err.reason})"
    if not any(values.values()):
        return None, None
    empty = [col for name, col in columns.ids() if not values[name]]
    if empty:
        return None, f"empty name in column {empty[0]} (repeated delimiter?)"
    if relations is not None and values["rel"] not in relations:
        expected = expected_relations(relations)
        return None, f"relation {values['rel']!r} in column {columns.rel} is not in the config ({expected})"
    weight = None
    if columns.weight is not None:
        word = words[columns.weight]  # type: ignore[index]  # the column indexes were validated against the line's width above
        try:
            weight = float(word)
        except ValueError:
            weight = math.nan
        if not math.isfinite(weight):
            return None, f"expected a finite number as weight, got {word.decode('utf-8', 'replace')!r}"
    return (values.get("lhs"), values.get("rhs"), values.get("rel"), weight), None
