"""bench.lib.logs: the one pattern of our log lines, the engine's step lines in them, PBG 1.0.0's bucket line."""

from __future__ import annotations

import datetime as dt

import pytest

from bench.lib.logs import LOG_LINE, SWAPPING, TRAINED, TRAINING, clock_time, pbg_buckets

ENGINE = (
    "21:15:38.480 | INFO    | pbg_core.session.engine - epoch 1/1, path 1/1, chunk 1/1: "
    "bucket (0, 1): trained 30 edges in 6.00 s (5 edges/s); count 30"
)
RELAYED = (
    "21:15:39.001 | INFO    | Task run 'train bucket (0, 1) on tcp://127.0.0.1:4242' - "
    "bucket (0, 1): trained 30 edges in 6.00 s (5 edges/s)"
)


def test_an_engine_line_has_its_logger_and_message() -> None:
    match = LOG_LINE.match(ENGINE)
    assert match is not None
    assert (match["clock"], match["level"], match["logger"]) == ("21:15:38.480", "INFO", "pbg_core.session.engine")
    found = TRAINED.search(match["message"])
    assert found is not None and found.groups() == ("0", "1", "30", "6.00")


def test_a_line_relayed_from_a_task_run_has_no_logger_but_its_whole_rest() -> None:
    match = LOG_LINE.match(RELAYED)
    assert match is not None and match["logger"] is None
    assert match["rest"].startswith("Task run 'train bucket (0, 1) on tcp://")
    assert TRAINED.search(match["rest"]) is not None


def test_other_lines_do_not_match() -> None:
    assert LOG_LINE.match("2026-12-04 20:10:56,611   [Trainer-0] ( 7 , 7 ): Loading entities") is None
    assert LOG_LINE.match("trained: checkpoints is at version 1") is None


def test_step_patterns() -> None:
    swap = SWAPPING.search("bucket (1, 0) (3 of 4): swapping partitions")
    assert swap is not None and swap.groups() == ("1", "0", "3", "4")
    start = TRAINING.search("bucket (1, 0): training 500 edges on 2 workers")
    assert start is not None and start.groups() == ("1", "0", "500", "2")


def test_a_clock_time_goes_on_the_day_nearest_to_the_anchor() -> None:
    before_midnight = dt.datetime(2026, 12, 4, 23, 59, 50).timestamp()
    after = clock_time("00:00:07.500", before_midnight)
    assert after - before_midnight == pytest.approx(17.5)
    assert clock_time("23:59:50.000", after) == pytest.approx(before_midnight)


def test_pbg_bucket_lines_with_and_without_io() -> None:
    log = (
        "2026-12-04 20:10:56,611   [Trainer-0] ( 7 , 7 ): bucket 1 / 64 : Processed 10789 edges in 2.68 s "
        "( 0.004 M/sec ); io: 0.14 s ( 174.89 MB/sec )\n"
        "2026-12-04 20:10:59,189   [Trainer-0] ( 0 , 0 ): bucket 1 / 1 : Processed 5216 edges in 0.55 s\n"
    )
    assert pbg_buckets(log) == [(10789, 2.68, 0.14), (5216, 0.55, None)]
