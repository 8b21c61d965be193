"""bench.lib.graphs.days: the simulated days are cut in time-like order with late entities."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.lib.graphs.days import DayPlan, cut_days, ensure_days

PLAN = DayPlan(nodes=2_000, edges=30_000, communities=20)


def test_day0_never_mentions_a_late_node_and_each_day_has_its_share() -> None:
    days, test, arrival = cut_days(PLAN)
    train = sum(len(day) for day in days)
    assert len(test) == 600 and train == 29_400
    assert abs(len(days[0]) / train - 0.70) < 0.01 and all(abs(len(d) / train - 0.06) < 0.01 for d in days[1:])
    nodes = PLAN.nodes
    for day, keys in enumerate(days):
        last_arrival = np.maximum(arrival[keys // nodes], arrival[keys % nodes])
        assert (last_arrival == day).all() if day == 0 else (last_arrival <= day).all()
    all_keys = np.concatenate([*days, test])
    assert len(np.unique(all_keys)) == PLAN.edges  # every edge once
    assert np.count_nonzero(arrival) == 200  # 10% of the nodes arrive after day 0


def test_the_files_are_written_once_per_plan(tmp_path: Path) -> None:
    meta = ensure_days(PLAN, tmp_path)
    assert meta["day_edges"] == [len(d) for d in cut_days(PLAN)[0]]
    assert 150 <= meta["entities_after_day0"] <= 200  # a late node may have no edge at all
    first = (tmp_path / "day3.tsv").stat().st_mtime_ns
    assert ensure_days(PLAN, tmp_path) == meta and (tmp_path / "day3.tsv").stat().st_mtime_ns == first
    line = (tmp_path / "test_new.tsv").read_text().splitlines()[0]
    assert line.startswith("n") and "\tn" in line
