"""pbg_core.stats: sums add exactly, averages divide by the count, PBG's dict shape round-trips."""

from __future__ import annotations

import pytest

from pbg_core.stats import Stats


def test_addition_sums_counts_and_metrics_including_ones_only_one_side_has() -> None:
    total = Stats(2, {"loss": 1.0, "reg": 0.5}) + Stats(3, {"loss": 2.0, "mrr": 1.5})
    assert total == Stats(5, {"loss": 3.0, "reg": 0.5, "mrr": 1.5})


def test_sum_of_many_and_of_none() -> None:
    parts = [Stats(1, {"loss": float(i)}) for i in range(4)]
    assert Stats.sum(parts) == Stats(4, {"loss": 6.0})
    assert Stats.sum([]) == Stats()


def test_average_divides_by_count_and_an_empty_stats_averages_to_zero() -> None:
    assert Stats(4, {"loss": 2.0, "r1": 3.0}).average() == {"loss": 0.5, "r1": 0.75}
    assert Stats(0, {"loss": 2.0}).average() == {"loss": 0.0}


def test_dict_form_is_pbg_shape_and_round_trips() -> None:
    stats = Stats(8, {"loss": 4.0, "mrr": 2.0})
    as_dict = stats.to_dict()
    assert as_dict == {"count": 8, "metrics": {"loss": 0.5, "mrr": 0.25}}
    back = Stats.from_dict(as_dict)
    assert back.count == 8 and back.metrics == pytest.approx(stats.metrics)


def test_format_is_one_line_of_means() -> None:
    assert Stats(1000, {"loss": 410.0, "mrr": 630.0}).format() == "count 1000 · loss 0.41 · mrr 0.63"
