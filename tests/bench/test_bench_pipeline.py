"""bench.pipeline's figures: the gaps between iterations, and the ratios and their noise verdict."""

from __future__ import annotations

import pytest

from bench.pipeline import iteration_figures, summarize


def test_iteration_figures_are_the_median_gap_and_the_span() -> None:
    figures = iteration_figures([10.0, 10.5, 11.5, 11.0], 4, "run x")
    assert figures == {"iteration_s": 0.5, "span_s": 1.5}


def test_a_missing_iteration_line_is_named_with_its_run() -> None:
    with pytest.raises(RuntimeError, match=r"run x: 3 'trained N edges' log lines, expected 4"):
        iteration_figures([1.0, 2.0, 3.0], 4, "run x")


def _runs(pipelined: list[float], in_order: list[float]) -> dict[str, dict[str, list[dict[str, float | None]]]]:
    def run(seconds: float) -> dict[str, float | None]:
        return {"command_s": seconds, "flow_run_s": None, "iteration_s": seconds / 10, "span_s": seconds / 2}

    return {"embedded": {"pipelined": [run(s) for s in pipelined], "in-order": [run(s) for s in in_order]}}


def test_ratios_are_taken_per_round_and_separate_ranges_are_beyond_noise() -> None:
    entry = summarize(_runs([10.0, 12.0, 11.0], [20.0, 18.0, 33.0]))["embedded"]
    assert "flow_run_s" not in entry["variants"]["pipelined"]  # embedded runs have no flow run in an API
    assert entry["variants"]["in-order"]["command_s"] == {"median": 20.0, "min": 18.0, "max": 33.0}
    assert list(entry["over_pipelined"]) == ["in-order"]
    ratio = entry["over_pipelined"]["in-order"]["command_s"]
    assert (ratio["median"], ratio["min"], ratio["max"]) == (2.0, 1.5, 3.0)
    assert ratio["beyond_noise"] is True
    assert ratio["saved_s_median"] == 9.0
    assert ratio["rounds_slower"] == 3


def test_overlapping_ranges_are_noise_and_one_round_has_no_verdict() -> None:
    overlapping = summarize(_runs([10.0, 12.0], [11.0, 13.0]))["embedded"]["over_pipelined"]["in-order"]
    assert overlapping["iteration_s"]["beyond_noise"] is False
    single = summarize(_runs([10.0], [20.0]))["embedded"]["over_pipelined"]["in-order"]
    assert single["command_s"]["beyond_noise"] is None
