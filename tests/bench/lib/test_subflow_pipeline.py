"""The subflow pipeline: bodies in order in the driving thread, calls created ahead, failures contained."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from prefect.states import State

from bench.lib.subflow_pipeline import SubflowPipeline, run_body

CREATE_SECONDS = 0.05  # stands for a subflow's API round trips before its body


class Recorder:
    """Records when each call's creation and body ran, and in which thread."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, float, str]] = []
        self.lock = threading.Lock()

    def note(self, what: str, index: int) -> None:
        with self.lock:
            self.events.append((what, index, time.monotonic(), threading.current_thread().name))

    def times(self, what: str) -> dict[int, float]:
        return {index: at for kind, index, at, _ in self.events if kind == what}

    def threads(self, what: str) -> set[str]:
        return {thread for kind, _, _, thread in self.events if kind == what}


def make_calls(recorder: Recorder, count: int, fail_at: int | None = None) -> list[Callable[[], Any]]:
    def body(index: int) -> int:
        recorder.note("body start", index)
        time.sleep(0.02)
        if index == fail_at:
            raise ValueError(f"iteration {index} broke")
        recorder.note("body end", index)
        return index * 10

    def call(index: int) -> Any:
        recorder.note("created", index)
        time.sleep(CREATE_SECONDS)
        outcome = run_body(body, index)
        recorder.note("ended", index)
        return outcome

    return [lambda index=index: call(index) for index in range(count)]


def test_bodies_run_in_order_in_the_driving_thread_and_results_come_in_order() -> None:
    recorder = Recorder()
    calls = make_calls(recorder, 5)
    results = list(SubflowPipeline().run_in_order(calls, [f"call {i}" for i in range(5)], lambda i: True))
    assert results == [0, 10, 20, 30, 40]
    assert recorder.threads("body start") == {threading.current_thread().name}
    assert recorder.threads("created").isdisjoint({threading.current_thread().name})
    starts, ends = recorder.times("body start"), recorder.times("body end")
    for index in range(1, 5):
        assert starts[index] >= ends[index - 1]  # one body at a time, in order


def test_each_call_is_created_while_the_previous_body_runs() -> None:
    recorder = Recorder()
    list(SubflowPipeline().run_in_order(make_calls(recorder, 4), [str(i) for i in range(4)], lambda i: True))
    created, body_ends = recorder.times("created"), recorder.times("body end")
    for index in range(1, 4):
        assert created[index] < body_ends[index - 1]


def test_no_call_is_created_ahead_across_a_pause_point() -> None:
    recorder = Recorder()
    seen: list[tuple[int, float]] = []
    pipeline = SubflowPipeline()
    for result in pipeline.run_in_order(make_calls(recorder, 3), ["0", "1", "2"], lambda i: i != 1):
        seen.append((result, time.monotonic()))
    created = recorder.times("created")
    yielded = dict(seen)
    assert created[1] < recorder.times("body end")[0]  # overlap allowed after 0
    assert created[2] > yielded[10]  # not after 1: created only once 1's result was handed out


def test_a_failing_body_propagates_and_the_call_created_ahead_is_cancelled() -> None:
    recorder = Recorder()
    calls = make_calls(recorder, 5, fail_at=1)
    outcomes: dict[int, Any] = {}

    def keep(index: int, call: Callable[[], Any]) -> Callable[[], Any]:
        def wrapped() -> Any:
            outcomes[index] = call()
            return outcomes[index]

        return wrapped

    wrapped = [keep(i, call) for i, call in enumerate(calls)]
    results = []
    with pytest.raises(ValueError, match="iteration 1 broke"):
        for result in SubflowPipeline().run_in_order(wrapped, [str(i) for i in range(5)], lambda i: True):
            results.append(result)
    assert results == [0]
    assert set(recorder.times("body start")) == {0, 1}  # 2 was created ahead, never ran
    assert set(recorder.times("created")) == {0, 1, 2}  # 3 and 4 never started
    assert isinstance(outcomes[2], State) and outcomes[2].is_cancelled()


def test_run_body_outside_a_pipeline_runs_right_here() -> None:
    assert run_body(lambda a, b: (a + b, threading.current_thread().name), 2, 3) == (5, threading.current_thread().name)


def test_a_slow_subflow_ending_does_not_hold_back_the_next_body() -> None:
    # A deployed run's subflow joins its heartbeat thread as it ends (up to a second).
    recorder = Recorder()

    def call(index: int) -> int:
        recorder.note("created", index)
        result = run_body(lambda: recorder.note("body start", index) or index)
        time.sleep(0.3)
        recorder.note("ended", index)
        return result

    calls = [lambda index=index: call(index) for index in range(4)]
    assert list(SubflowPipeline().run_in_order(calls, list("abcd"), lambda i: True)) == [0, 1, 2, 3]
    starts, ends = recorder.times("body start"), recorder.times("ended")
    for index in range(1, 4):
        assert starts[index] < ends[index - 1]
