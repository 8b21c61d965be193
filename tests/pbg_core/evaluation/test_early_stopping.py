"""The best validation row and the early-stopping decision: patience, min_delta, ties, NaN, setups."""

from __future__ import annotations

import math

import pytest

from pbg_core.evaluation.early_stopping import ValidationRow, best_of, comparable, stop_reason


def row(version: int, mrr: float, setup: str = "s", r10: float = 0.5) -> ValidationRow:
    return ValidationRow(version, version * 2, mrr, 0.1, r10, 10, False, 0.1, setup)


def rows(*values: float) -> list[ValidationRow]:
    return [row(i + 1, v) for i, v in enumerate(values)]


def test_best_is_the_highest_and_the_earliest_on_a_tie() -> None:
    found = best_of(rows(0.2, 0.5, 0.5, 0.4), "mrr")
    assert found is not None and found.version == 2


def test_nan_is_never_best_and_all_nan_is_none() -> None:
    found = best_of(rows(math.nan, 0.1, math.nan), "mrr")
    assert found is not None and found.version == 2
    assert best_of(rows(math.nan), "mrr") is None
    assert best_of([], "mrr") is None


def test_best_follows_the_metric() -> None:
    a, b = row(1, 0.9, r10=0.1), row(2, 0.1, r10=0.9)
    assert best_of([a, b], "mrr") == a and best_of([a, b], "r10") == b
    with pytest.raises(ValueError, match="auc"):
        best_of([a], "auc")


@pytest.mark.parametrize(
    ("values", "patience", "stops"),
    [
        ((0.1, 0.2, 0.3), 1, False),
        ((0.3, 0.2), 1, True),
        ((0.3, 0.2), 2, False),
        ((0.3, 0.2, 0.3), 2, True),  # equal is no improvement
        ((0.3, 0.2, 0.31, 0.2), 2, False),  # the clock restarts at an improvement
        ((math.nan, math.nan), 2, True),
        ((math.nan, 0.1), 1, False),
        ((), 1, False),
    ],
)
def test_patience(values: tuple[float, ...], patience: int, stops: bool) -> None:
    assert (stop_reason(rows(*values), "mrr", patience, 0.0) is not None) is stops


def test_min_delta_counts_only_bigger_improvements() -> None:
    assert stop_reason(rows(0.30, 0.305, 0.309), "mrr", 2, 0.01) is not None
    assert stop_reason(rows(0.30, 0.305, 0.311), "mrr", 2, 0.01) is None


def test_the_reason_is_one_line_naming_the_best() -> None:
    reason = stop_reason(rows(0.5, 0.9412, 0.9, 0.8), "mrr", 2, 0.0)
    assert reason == (
        "early stopping: mrr did not improve in the last 2 validations (best 0.9412 at v2, epoch 4; patience 2)"
    )


def test_comparable_keeps_one_setup_up_to_the_committed_version() -> None:
    mixed = [row(3, 0.1), row(1, 0.2, setup="other"), row(2, 0.3), row(5, 0.9)]
    assert [r.version for r in comparable(mixed, "s", 4)] == [2, 3]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="patience"):
        stop_reason([], "mrr", 0, 0.0)
