"""pbg_core.session.records: a bucket's stats row and PBG's per-chunk average row."""

from __future__ import annotations

from pbg_core.session.iterations import build_iterations
from pbg_core.session.records import BucketRecord, bucket_row, chunk_average_row
from pbg_core.stats import Stats
from pbg_core.types import Bucket

ITERATION = build_iterations(num_epochs=2, edge_paths=["a", "b"], num_edge_chunks=1)[3]  # epoch 2, path b


def record(bucket: Bucket, position: int, before: float | None = None) -> BucketRecord:
    return BucketRecord(
        bucket=bucket,
        position=position,
        train=Stats(count=10, metrics={"loss": 40.0}),  # Stats hold sums; rows show means
        eval_before=None if before is None else Stats(count=2, metrics={"mrr": 2 * before}),
        timing={"train": 0.5},
        io={"bytes_read": 64.0},
    )


def test_bucket_row_numbers_the_bucket_across_the_whole_run() -> None:
    row = bucket_row(record(Bucket(1, 0), position=2, before=1.0), ITERATION, buckets_in_pass=4)
    assert row == {
        "lhs_partition": 1,
        "rhs_partition": 0,
        "index": 3 * 4 + 2,  # iteration 3 of 4 buckets, third bucket
        "stats": {"count": 10, "metrics": {"loss": 4.0}},
        "epoch_idx": 1,
        "edge_path_idx": 1,
        "edge_chunk_idx": 0,
        "timing": {"train": 0.5},
        "io": {"bytes_read": 64.0},
        "eval_stats_before": {"count": 2, "metrics": {"mrr": 1.0}},
    }


def test_an_untrained_bucket_row_has_empty_stats_and_no_eval_keys() -> None:
    row = bucket_row(BucketRecord(bucket=Bucket(0, 0), position=0), ITERATION, buckets_in_pass=1)
    assert row["stats"] == Stats().to_dict() and row["index"] == 3
    assert "eval_stats_before" not in row and "eval_stats_after" not in row


def test_chunk_average_row_averages_the_held_out_stats_before_training() -> None:
    rows = [bucket_row(record(Bucket(0, p), p, before=m), ITERATION, 2) for p, m in [(0, 0.2), (1, 0.6)]]
    average = chunk_average_row(rows, ITERATION)
    assert average is not None
    assert average["index"] == rows[-1]["index"] == 7
    assert (average["epoch_idx"], average["edge_path_idx"], average["edge_chunk_idx"]) == (1, 1, 0)
    # Weighted by count (2 each): (0.2 * 2 + 0.6 * 2) / 4.
    assert average["eval_stats_chunk_avg"] == {"count": 4, "metrics": {"mrr": 0.4}}


def test_no_chunk_average_without_held_out_stats_or_rows() -> None:
    rows = [bucket_row(record(Bucket(0, 0), 0), ITERATION, 1)]
    assert chunk_average_row(rows, ITERATION) is None
    assert chunk_average_row([], ITERATION) is None
