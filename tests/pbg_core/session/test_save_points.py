"""pbg_core.session.save_points: which finished buckets are save points, and the rows held until one."""

import time

from pbg_core.session.save_points import CHEAP_SAVE_BYTES, SavePoints

BIG = CHEAP_SAVE_BYTES + 1


def test_every_bucket_is_a_save_point_with_interval_0_small_partitions_or_at_the_end_of_the_pass() -> None:
    assert SavePoints(interval=0).due(BIG, 1.0, last_bucket=False)
    assert SavePoints(interval=3600).due(CHEAP_SAVE_BYTES, 1.0, last_bucket=False)
    assert SavePoints(interval=3600).due(BIG, 1.0, last_bucket=True)


def test_big_saves_wait_until_one_more_bucket_would_pass_the_interval() -> None:
    points = SavePoints(interval=600)
    assert not points.due(BIG, 60.0, last_bucket=False)
    points.last = time.monotonic() - 550  # 550 s since the last save point; the next bucket takes ~60 s
    assert points.due(BIG, 60.0, last_bucket=False)
    points.last = time.monotonic() - 100
    assert points.due(BIG, 600.0, last_bucket=False)  # a bucket longer than the interval: every one


def test_rows_are_held_by_index_until_taken_and_a_retry_replaces_its_row() -> None:
    points = SavePoints(interval=600)
    points.hold({"index": 3, "loss": 1.0})
    points.hold({"index": 1, "loss": 2.0})
    points.hold({"index": 3, "loss": 0.5})  # the same bucket finished again (a retried step)
    points.last = time.monotonic() - 500
    assert points.take() == [{"index": 1, "loss": 2.0}, {"index": 3, "loss": 0.5}]
    assert points.held == {} and points.seconds_since() < 1.0
