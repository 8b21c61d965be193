"""bench.overhead: its view of the flow it instruments, and its arithmetic."""

from __future__ import annotations

import inspect

from bench.overhead import overhead_figures


def test_the_iteration_body_still_takes_what_the_timer_reads() -> None:
    """The timer wraps the iteration subflow's body, flows.train._iteration_steps, and reads its (handle, iteration)."""
    import flows.train as ft

    names = list(inspect.signature(ft._iteration_steps).parameters)
    assert names[:2] == ["handle", "iteration"]


def test_overhead_is_caller_time_minus_engine_time_per_bucket_and_iteration() -> None:
    per_iteration = {
        "-1": {"iteration": 9.0},  # the start, not an iteration
        "0": {
            "iteration": 2.0,
            "task.train_bucket": 1.2,
            "engine.train": 1.0,
            "task.load_edges": 0.3,
            "engine.load_edges": 0.2,
            "engine.swap_partitions": 0.1,
        },
    }
    figures = overhead_figures({"per_iteration": per_iteration}, buckets_per_iteration=2)
    assert abs(figures["per_bucket_s"] - (0.2 + 0.1 - 0.1) / 2) < 1e-12
    assert abs(figures["per_iteration_s"] - (2.0 - 1.3)) < 1e-12
