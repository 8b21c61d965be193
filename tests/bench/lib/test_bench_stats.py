"""bench.lib.stats: training_stats.json read back through StatsLog, and the benchmarks' sums of its rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.lib import stats
from storage.errors import BadDataError

ROWS = [
    {"index": 0, "stats": {"count": 10}, "timing": {"train": 2.0, "save": 0.5}, "io": {"bytes_read": 7}},
    {"index": 0, "eval_stats_chunk_avg": {"mrr": 0.5}},
    {"index": 1, "stats": {"count": 30}, "timing": {"train": 4.0}},
]


def write(directory: Path, rows: list[dict]) -> None:
    (directory / "training_stats.json").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_rows_in_file_order_and_bucket_rows_without_the_summaries(tmp_path: Path) -> None:
    write(tmp_path, ROWS)
    assert stats.read_rows(tmp_path) == ROWS
    buckets = stats.bucket_rows(tmp_path)
    assert [row["index"] for row in buckets] == [0, 1] and all("stats" in row for row in buckets)


def test_sums() -> None:
    buckets = [ROWS[0], ROWS[2]]
    assert stats.edges(buckets) == 40
    assert stats.total(buckets, "timing", "train") == 6.0
    assert stats.total(buckets, "timing", "save") == 0.5  # the row without it is left out
    assert stats.total(buckets, "timing", "eval_after") is None  # no row has it: not a guess
    assert stats.total_or_zero(buckets, "timing", "eval_after") == 0.0
    assert stats.total(buckets, "io", "bytes_read") == 7.0


def test_a_missing_file_is_no_rows_and_a_bad_line_is_named(tmp_path: Path) -> None:
    assert stats.read_rows(tmp_path) == [] and stats.bucket_rows(tmp_path) == []
    (tmp_path / "training_stats.json").write_text('{"index": 0}\nnot json\n')
    with pytest.raises(BadDataError, match="line 2"):
        stats.read_rows(tmp_path)
