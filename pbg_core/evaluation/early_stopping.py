"""Validation results and the two decisions made from them: which version is best, and when to stop.

A :class:`ValidationRow` is one validation of one checkpoint version (filtered ranking of the
config's ``validation.edge_path``; pbg_core/config/quality_sections.py). Rows are compared only
with rows of the same ``setup`` (what was ranked, how: another edge path, sample or candidate
count gives numbers on another scale). Both decisions are pure functions of the rows, so a rerun
takes the same ones from the same file, whatever step the previous run was killed at:

- :func:`best_of`: the row with the highest value of the metric (the earliest on a tie: it got
  there first); a NaN value is never best;
- :func:`stop_reason`: early stopping, once the last ``patience`` validations have not
  improved on the best before them by more than ``min_delta``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

METRICS = ("mrr", "r1", "r10")


@dataclass(frozen=True)
class ValidationRow:
    """One validation of checkpoint ``version`` (after ``epoch`` epochs, counted from 1)."""

    version: int
    epoch: int
    mrr: float
    r1: float
    r10: float
    count: int  # edges ranked
    sampled: bool  # a sample of the edges, or sampled candidates: not comparable with full ranking
    seconds: float
    setup: str  # what was ranked and how (:func:`tasks.validation_steps.validation_setup`)

    def value(self, metric: str) -> float:
        """The row's ``metric`` (one of :data:`METRICS`).

        Raises:
            ValueError: an unknown metric, naming the allowed ones.
        """
        if metric not in METRICS:
            raise ValueError(f"validation metric {metric!r} is not one of {', '.join(METRICS)}")
        return float(getattr(self, metric))


def comparable(rows: Iterable[ValidationRow], setup: str, up_to: int) -> list[ValidationRow]:
    """The rows of ``setup`` of versions ``1..up_to``, by version (rows above it are of an uncommitted version)."""
    return sorted((row for row in rows if row.setup == setup and 0 < row.version <= up_to), key=lambda r: r.version)


def best_of(rows: Sequence[ValidationRow], metric: str) -> ValidationRow | None:
    """The row with the highest ``metric``, the earliest version on a tie; None if no value is a number."""
    best: ValidationRow | None = None
    for row in sorted(rows, key=lambda r: r.version):
        value = row.value(metric)
        if not math.isnan(value) and (best is None or value > best.value(metric)):
            best = row
    return best


def stop_reason(rows: Sequence[ValidationRow], metric: str, patience: int, min_delta: float) -> str | None:
    """Why training stops after ``rows`` (comparable, by version), or None to go on.

    A validation improves when its value exceeds the best counted so far by more than
    ``min_delta`` (the first number always does); NaN never improves. Stops once the last
    ``patience`` validations did not.
    """
    if patience < 1 or min_delta < 0:
        raise ValueError(f"patience must be >= 1 and min_delta >= 0, got {patience} and {min_delta}")
    counted: ValidationRow | None = None
    since = 0
    for row in sorted(rows, key=lambda r: r.version):
        value = row.value(metric)
        if not math.isnan(value) and (counted is None or value > counted.value(metric) + min_delta):
            counted, since = row, 0
        else:
            since += 1
    if since < patience:
        return None
    best = f"best {counted.value(metric):.4f} at v{counted.version}, epoch {counted.epoch}" if counted else "no number"
    by = f" by more than {min_delta:g}" if min_delta else ""
    return f"early stopping: {metric} did not improve{by} in the last {since} validations ({best}; patience {patience})"
