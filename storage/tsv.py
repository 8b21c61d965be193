"""Reading TSV edge lists: which columns hold what, and one row per line.

The file may be local or remote (read through :func:`storage.fs.local_read_path`).
A line is split on ``delimiter`` (None: any run of whitespace, like PBG) and must have
at least :attr:`Columns.needed` columns. The weight column, if any, must hold a finite
number. Blank lines are reported as None (PBG crashes on them). Errors name
``file:line`` and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from storage import fs
from storage.errors import BadDataError

Row = tuple[str, str, "str | None", float]  # lhs name, rhs name, relation name, weight


class Columns(NamedTuple):
    """0-based column indices of a TSV line (``rel``/``weight`` optional)."""

    lhs: int
    rhs: int
    rel: int | None
    weight: int | None

    @property
    def needed(self) -> int:
        """How many columns a line must have."""
        return 1 + max(c for c in self if c is not None)

    def describe(self) -> str:
        """E.g. ``lhs=0, rhs=2, rel=1`` (for error messages)."""
        return ", ".join(f"{n}={c}" for n, c in zip(self._fields, self) if c is not None)


def _parse_weight(word: str, url: str, number: int) -> float:
    try:
        weight = float(word)
    except ValueError:
        weight = math.nan
    if not math.isfinite(weight):
        raise BadDataError(url, f"line {number}: expected a finite number as weight, got {word!r}")
    return weight


def read_rows(
    url: str,
    columns: Columns,
    delimiter: str | None,
    on_line: Callable[[int], None],
    storage_options: Any = None,
) -> Iterator[Row | None]:
    """Yield one row per data line and None per blank line of the edge list at ``url``.

    Args:
        url: The edge-list file or URL (UTF-8 text).
        columns: Which columns hold what.
        delimiter: Column separator; None splits on any run of whitespace like PBG.
        on_line: Called as ``on_line(1)`` for every line read (progress counting).
        storage_options: fsspec options for ``url``.

    Raises:
        BadDataError: A line has too few columns or a bad weight, or there is no data line.
    """
    rel_col, weight_col, needed = columns.rel, columns.weight, columns.needed
    data_lines = number = 0
    try:
        # Through the read cache: an importer reads every input twice (count, then write),
        # and a remote input is then downloaded once.
        with fs.local_read_path(url, storage_options) as local, open(local, encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                on_line(1)
                words = line.split() if delimiter is None else line.rstrip("\r\n").split(delimiter)
                if len(words) < needed:  # blank lines land here too: checked only on this slow path
                    if not line.strip():
                        yield None
                        continue
                    raise BadDataError(
                        url,
                        f"line {number}: expected at least {needed} columns ({columns.describe()}, "
                        f"0-based) but found {len(words)}: {line.rstrip()[:100]!r}",
                    )
                weight = 1.0 if weight_col is None else _parse_weight(words[weight_col], url, number)
                yield words[columns.lhs], words[columns.rhs], None if rel_col is None else words[rel_col], weight
                data_lines += 1
    except UnicodeDecodeError as err:
        raise BadDataError(url, f"line {number + 1}: expected UTF-8 text ({err.reason})") from None
    if data_lines == 0:
        raise BadDataError(url, "line 1: expected an edge per line, the file has no edges")
