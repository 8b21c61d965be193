"""Numbers of the run reports: reading stats rows, rounding, and the placeholder of a missing value.

Shared by :mod:`storage.stats_report`, :mod:`storage.learning_curve` and
:mod:`storage.retraining.report`, so that every table and sentence rounds the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

Row = Mapping[str, Any]

MISSING = "–"  # noqa: RUF001 - an en dash on purpose: the tables' placeholder for a missing value


def get(row: Row, *keys: str) -> Any:
    """``row[keys[0]][keys[1]]...``, or None where a level is missing or not a mapping."""
    value: Any = row
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def number(value: Any) -> float | None:
    """``value`` as a finite float, else None (missing, NaN, inf or not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def rounded(value: float | None, digits: int) -> float | None:
    """``value`` rounded to ``digits`` decimals (None stays None)."""
    return None if value is None else round(value, digits)


def sig(value: float | None, digits: int = 4) -> float | None:
    """Round to ``digits`` significant digits (losses span orders of magnitude)."""
    return None if value is None else float(f"{value:.{digits}g}")


def ratio(value: Any) -> float | None:
    """A metric in [0, 1] (MRR, Hits@k) to 4 decimals."""
    return rounded(number(value), 4)


def rate(count: float | None, seconds: float | None) -> float | None:
    """Edges per second to 1 decimal; None without a positive duration."""
    if count is None or seconds is None or seconds <= 0:
        return None
    return round(count / seconds, 1)


def fmt(value: float | None) -> str:
    """4 significant digits, or the placeholder of a missing value."""
    return MISSING if value is None else f"{value:.4g}"


def fmt_rate(value: float | None) -> str:
    """A rate with thousands separators and no decimals (``12,345``)."""
    return MISSING if value is None else f"{value:,.0f}"
