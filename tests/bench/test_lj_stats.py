"""bench/lj_stats.py: the epoch's parts from stats rows and step lines; PBG 1.0.0's bucket lines."""

from __future__ import annotations

import json
from pathlib import Path

import lj_stats
import pytest

LABEL = "INFO    | pbg_core.session.engine - epoch 1/1 · path 1/1 · chunk 1/1:"
OURS_LOG = "\n".join(
    [
        f"23:59:50.000 | {LABEL} bucket (1, 1) (1 of 2): swapping partitions",
        f"23:59:51.000 | {LABEL} bucket (1, 1): training 10 edges on 2 workers",
        f"23:59:55.000 | {LABEL} bucket (0, 1) (2 of 2): swapping partitions",
        f"00:00:05.500 | {LABEL} writing checkpoint version 1",
        f"00:00:07.000 | {LABEL} committing version 1",
    ]
)


def row(count: int, train: float, save: float, io_s: float, **timing: float) -> dict:
    return {
        "stats": {"count": count},
        "timing": {"train": train, "save": save, "load_edges": 0.5, **timing},
        "io": {"seconds": io_s, "bytes_written": 100, "bytes_read": 50},
    }


def test_epoch_parts_add_up_across_midnight() -> None:
    rows = [row(10, 4.0, 1.0, 0.5), row(30, 6.0, 2.0, 1.5)]
    epoch = lj_stats.epoch_breakdown(rows, OURS_LOG)
    seconds = epoch["seconds"]
    assert epoch["epoch_s"] == pytest.approx(17.0)
    assert (
        seconds["train"] == 10.0
        and seconds["progress_saves"] == 3.0
        and seconds["partition_io_on_training_thread"] == 2.0
    )
    assert seconds["load_edges"] == 1.0 and seconds["checkpoint"] == pytest.approx(1.5)
    assert seconds["other"] == pytest.approx(17.0 - 10 - 3 - 2 - 1 - 1.5)
    assert seconds["eval_before"] is None and epoch["share"]["eval_before"] is None
    assert seconds["load_ahead_save_behind_waits"] is None  # no row records a wait
    assert epoch["overlapped_io_s"] is None
    assert epoch["share"]["train"] == pytest.approx(10 / 17)


def test_wait_fields_are_summed_under_their_own_names() -> None:
    rows = [row(10, 4.0, 1.0, 0.5, wait_load=0.25), row(30, 6.0, 2.0, 1.5, wait_load=0.5, wait_save=1.0)]
    seconds = lj_stats.epoch_breakdown(rows, OURS_LOG)["seconds"]
    assert seconds["wait:wait_load"] == 0.75 and seconds["wait:wait_save"] == 1.0
    assert "load_ahead_save_behind_waits" not in seconds


def test_without_step_lines_the_epoch_is_not_guessed() -> None:
    epoch = lj_stats.epoch_breakdown([row(10, 4.0, 1.0, 0.5)], "trained: checkpoints is at version 1")
    assert epoch["epoch_s"] is None and epoch["seconds"]["other"] is None and epoch["seconds"]["checkpoint"] is None


def test_ours_throughput_and_rows_file(tmp_path: Path) -> None:
    path = tmp_path / "training_stats.json"
    lines = [row(10, 4.0, 1.0, 0.5), {"index": 1, "eval_stats_chunk_avg": {}}, row(30, 6.0, 2.0, 1.5)]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    figures = lj_stats.ours_throughput(lj_stats.read_rows(path))
    assert (figures["buckets"], figures["edges"], figures["edges_per_s"]) == (2, 40, 4.0)
    assert figures["swap_bytes_written"] == 200
    assert lj_stats.read_rows(tmp_path / "missing.json") == []


def test_pbg_bucket_lines() -> None:
    log = (
        "2026-12-04 20:10:56,611   [Trainer-0] ( 7 , 7 ): bucket 1 / 64 : Processed 10789 edges in 2.68 s "
        "( 0.004 M/sec ); io: 0.14 s ( 174.89 MB/sec )\n"
        "2026-12-04 20:10:59,189   [Trainer-0] ( 6 , 7 ): bucket 2 / 64 : Processed 10432 edges in 2.55 s "
        "( 0.0041 M/sec ); io: 0.03 s ( 864.21 MB/sec )\n"
    )
    figures = lj_stats.pbg_throughput(log)
    assert (figures["buckets"], figures["edges"]) == (2, 21221)
    assert figures["compute_s"] == pytest.approx(5.23) and figures["io_s"] == pytest.approx(0.17)


def test_background_io_is_reported_beside_the_epoch_not_in_it() -> None:
    rows = [row(10, 4.0, 1.0, 0.5), row(30, 6.0, 2.0, 1.5)]
    for item, background in zip(rows, (3.0, 4.0), strict=True):
        item["io"]["background_seconds"] = background
    epoch = lj_stats.epoch_breakdown(rows, OURS_LOG)
    assert epoch["overlapped_io_s"] == 7.0
    assert epoch["seconds"]["other"] == pytest.approx(17.0 - 10 - 3 - 2 - 1 - 1.5)
    assert "load_ahead_save_behind_waits" not in epoch["seconds"]
