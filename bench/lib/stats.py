"""A finished run's ``training_stats.json`` read back through :class:`storage.stats_log.StatsLog`,
and the sums the benchmarks take of its rows (the fields are in docs/formats.md).

Bucket rows carry ``stats`` (``count``: edges trained), ``timing`` (seconds by step: ``train``,
``load_edges``, ``save``, ...) and ``io`` (the engine's partition I/O: ``seconds``, ``bytes_read``,
``bytes_written``); an iteration's evaluation summary row carries ``eval_stats_chunk_avg`` instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storage.stats_log import SUMMARY_KEY, StatsLog

Row = dict[str, Any]


def read_rows(checkpoint: str | Path) -> list[Row]:
    """Every row of the checkpoint's stats file, in file order ([] when there is none).

    Raises:
        storage.errors.BadDataError: a line is not a stats row (names the file and line).
    """
    return StatsLog(str(checkpoint)).read()


def bucket_rows(checkpoint: str | Path) -> list[Row]:
    """The per-bucket rows (with ``stats``; the iterations' evaluation summaries skipped)."""
    return [row for row in read_rows(checkpoint) if "stats" in row and SUMMARY_KEY not in row]


def edges(rows: list[Row]) -> int:
    """Edges trained over ``rows``."""
    return sum(int(row["stats"]["count"]) for row in rows)


def total(rows: list[Row], section: str, key: str) -> float | None:
    """Sum of ``row[section][key]`` over the rows that carry it; None when none does."""
    values = [float(row[section][key]) for row in rows if key in (row.get(section) or {})]
    return sum(values) if values else None


def total_or_zero(rows: list[Row], section: str, key: str) -> float:
    """Sum of ``row[section][key]``, a missing value counting 0."""
    return total(rows, section, key) or 0.0
