"""Tests for storage.stats_log: rows keyed by index, replace-on-rewrite, sorted, atomic."""

from __future__ import annotations

import json

import pytest
from store_io import StorePath

from storage.errors import BadDataError
from storage.stats_log import StatsLog


def _row(index: int, loss: float) -> dict:
    return {
        "lhs_partition": 0,
        "rhs_partition": index,
        "index": index,
        "stats": {"count": 10, "metrics": {"loss": loss}},
    }


def test_missing_file_reads_empty(root: StorePath) -> None:
    assert StatsLog(str(root)).read() == []


def test_write_keeps_rows_sorted_and_json_lines(root: StorePath) -> None:
    log = StatsLog(str(root))
    log.write([_row(2, 0.2), _row(0, 0.0)])
    log.write([_row(1, 0.1)])
    assert [r["index"] for r in log.read()] == [0, 1, 2]
    lines = (root / "training_stats.json").read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == [0, 1, 2]


def test_rewriting_an_index_replaces_the_row(root: StorePath) -> None:
    log = StatsLog(str(root))
    log.write([_row(0, 1.0), _row(1, 1.0)])
    # A retried iteration writes its rows again with new values.
    log.write([_row(1, 0.5)])
    rows = log.read()
    assert len(rows) == 2
    assert rows[1]["stats"]["metrics"]["loss"] == 0.5
    assert rows[0]["stats"]["metrics"]["loss"] == 1.0


def test_summary_row_with_same_index_is_kept_after_its_bucket_row(root: StorePath) -> None:
    log = StatsLog(str(root))
    summary = {"epoch_idx": 0, "edge_path_idx": 0, "edge_chunk_idx": 0, "index": 3, "eval_stats_chunk_avg": {}}
    log.write([summary, _row(3, 0.3), _row(4, 0.4)])
    log.write([_row(3, 0.9)])
    rows = log.read()
    assert [(r["index"], "eval_stats_chunk_avg" in r) for r in rows] == [(3, False), (3, True), (4, False)]
    assert rows[0]["stats"]["metrics"]["loss"] == 0.9


def test_reads_pbg_written_file(root: StorePath) -> None:
    text = json.dumps(_row(0, 0.1)) + "\n" + json.dumps(_row(1, 0.2)) + "\n"
    (root / "training_stats.json").write_text(text)
    assert [r["index"] for r in StatsLog(str(root) if root.is_s3 else f"file://{root}").read()] == [0, 1]


def test_corrupt_line_names_line_number(root: StorePath) -> None:
    (root / "training_stats.json").write_text(json.dumps(_row(0, 0.1)) + "\n{not json\n")
    with pytest.raises(BadDataError, match="line 2"):
        StatsLog(str(root)).read()
    (root / "training_stats.json").write_text('{"no_index": 1}\n')
    with pytest.raises(BadDataError, match="line 1: expected a JSON object with an int 'index'"):
        StatsLog(str(root)).read()


@pytest.mark.parametrize("bad", [{"stats": {}}, {"index": "3"}, {"index": True}])
def test_write_rejects_rows_without_int_index(root: StorePath, bad: dict) -> None:
    with pytest.raises(ValueError, match="int 'index'"):
        StatsLog(str(root)).write([bad])
    assert not (root / "training_stats.json").exists()
