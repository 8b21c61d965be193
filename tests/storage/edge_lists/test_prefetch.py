"""Tests of the one-ahead background producer used by the importer's parser."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from storage.edge_lists.prefetch import prefetched


def test_items_arrive_in_order_and_the_producer_runs_ahead_by_at_most_depth() -> None:
    produced: list[int] = []

    def numbers() -> Iterator[int]:
        for i in range(20):
            produced.append(i)
            yield i

    seen = []
    for item in prefetched(numbers(), depth=2):
        time.sleep(0.01)  # a slow consumer: the producer must wait, not run to the end
        assert len(produced) <= item + 1 + 2 + 1  # the item, the queue, one being produced
        seen.append(item)
    assert seen == list(range(20))


def test_a_producer_error_is_raised_at_its_place() -> None:
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("bad block 3")

    got = []
    with pytest.raises(ValueError, match="bad block 3"):
        for item in prefetched(failing()):
            got.append(item)
    assert got == [1, 2]


def test_stopping_early_stops_the_producer_and_closes_it() -> None:
    closed = threading.Event()

    def endless() -> Iterator[int]:
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    before = threading.active_count()
    items = prefetched(endless(), name="test-prefetch")
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    items.close()  # what a break or an exception in the consumer does
    assert closed.is_set()
    assert threading.active_count() == before
    assert not any(t.name == "test-prefetch" for t in threading.enumerate())
