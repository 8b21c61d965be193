"""bench.livejournal: the epoch's parts from stats rows and step lines; PBG 1.0.0's bucket lines; PBG's
LiveJournal config with the benchmark's changes, and the disk check."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench import livejournal
from bench.lib import stats
from bench.lib.graphs import chung_lu
from pbg_core.config.validation import parse_config

LABEL = "INFO    | pbg_core.session.engine - epoch 1/1, path 1/1, chunk 1/1:"
OURS_LOG = "\n".join(
    f"{stamp} | {LABEL} {message}"
    for stamp, message in [
        ("23:59:50.000", "bucket (1, 1) (1 of 2): swapping partitions"),
        ("23:59:52.000", "bucket (1, 1): training 10 edges on 2 workers"),
        ("23:59:56.000", "bucket (1, 1): trained 10 edges in 4.00 s (2 edges/s); count 10"),
        ("23:59:56.100", "bucket (1, 1): saving its partitions and progress"),
        ("23:59:57.000", "bucket (0, 1) (2 of 2): swapping partitions"),
        ("23:59:59.500", "bucket (0, 1): training 30 edges on 2 workers"),
        ("00:00:05.500", "bucket (0, 1): trained 30 edges in 6.00 s (5 edges/s); count 30"),
        ("00:00:05.600", "writing checkpoint version 1"),
        ("00:00:07.000", "committing version 1"),
    ]
)


def row(count: int, train: float, save: float, io_s: float, **timing: float) -> dict:
    return {
        "stats": {"count": count},
        "timing": {"train": train, "save": save, "load_edges": 0.5, **timing},
        "io": {"seconds": io_s, "bytes_written": 100, "bytes_read": 50},
    }


def test_epoch_parts_do_not_overlap_and_add_up_across_midnight() -> None:
    rows = [row(10, 4.0, 0.8, 0.5), row(30, 6.0, 0.0, 1.5)]
    epoch = livejournal.epoch_breakdown(rows, OURS_LOG)
    seconds = epoch["seconds"]
    assert epoch["epoch_s"] == pytest.approx(17.0)
    # swapping -> training is 2.0 s + 2.5 s; 0.5 s of each is edge loading.
    assert epoch["swap_to_train_s"] == pytest.approx(4.5)
    assert seconds["partition_swap_step"] == pytest.approx(3.5) and seconds["load_edges"] == 1.0
    assert seconds["train"] == 10.0 and seconds["progress_saves"] == 0.8
    assert seconds["checkpoint"] == pytest.approx(1.4)
    assert seconds["other"] == pytest.approx(17.0 - 10 - 3.5 - 1 - 0.8 - 1.4)
    assert seconds["eval_before"] is None and epoch["share"]["eval_before"] is None
    assert epoch["share"]["train"] == pytest.approx(10 / 17)
    # The engine's counters are listed beside the split, not in it.
    assert epoch["engine_counters"] == {"io.seconds": 2.0, "io.background_seconds": None}


def test_wait_fields_and_background_io_are_counters() -> None:
    rows = [row(10, 4.0, 1.0, 0.5, wait_load=0.25), row(30, 6.0, 2.0, 1.5, wait_load=0.5, wait_save=1.0)]
    for item, background in zip(rows, (3.0, 4.0), strict=True):
        item["io"]["background_seconds"] = background
    epoch = livejournal.epoch_breakdown(rows, OURS_LOG)
    counters = epoch["engine_counters"]
    assert counters["timing.wait_load"] == 0.75 and counters["timing.wait_save"] == 1.0
    assert counters["io.background_seconds"] == 7.0
    assert epoch["seconds"]["other"] == pytest.approx(17.0 - 10 - 3.5 - 1 - 3 - 1.4)


def test_a_pass_that_starts_again_is_measured_from_its_last_start() -> None:
    again = f"23:59:40.000 | {LABEL} bucket (1, 1) (1 of 2): swapping partitions\n" + OURS_LOG
    assert livejournal.epoch_breakdown([row(10, 4.0, 1.0, 0.5)], again)["epoch_s"] == pytest.approx(17.0)


def test_without_step_lines_the_epoch_is_not_guessed() -> None:
    epoch = livejournal.epoch_breakdown([row(10, 4.0, 1.0, 0.5)], "trained: checkpoints is at version 1")
    seconds = epoch["seconds"]
    assert epoch["epoch_s"] is None and seconds["other"] is None
    assert seconds["checkpoint"] is None and seconds["partition_swap_step"] is None


def test_ours_throughput_from_the_bucket_rows_of_the_stats_file(tmp_path: Path) -> None:
    lines = [
        {"index": 0, **row(10, 4.0, 1.0, 0.5)},
        {"index": 0, "eval_stats_chunk_avg": {}},
        {"index": 1, **row(30, 6.0, 2.0, 1.5)},
    ]
    (tmp_path / "training_stats.json").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    figures = livejournal.ours_throughput(stats.bucket_rows(tmp_path))
    assert (figures["buckets"], figures["edges"], figures["edges_per_s"]) == (2, 40, 4.0)
    assert figures["swap_bytes_written"] == 200


def test_pbg_bucket_lines() -> None:
    log = (
        "2026-12-04 20:10:56,611   [Trainer-0] ( 7 , 7 ): bucket 1 / 64 : Processed 10789 edges in 2.68 s "
        "( 0.004 M/sec ); io: 0.14 s ( 174.89 MB/sec )\n"
        "2026-12-04 20:10:59,189   [Trainer-0] ( 6 , 7 ): bucket 2 / 64 : Processed 10432 edges in 2.55 s "
        "( 0.0041 M/sec ); io: 0.03 s ( 864.21 MB/sec )\n"
    )
    figures = livejournal.pbg_throughput(log)
    assert (figures["buckets"], figures["edges"]) == (2, 21221)
    assert figures["compute_s"] == pytest.approx(5.23) and figures["io_s"] == pytest.approx(0.17)


def test_memory_plan_line_is_read_back() -> None:
    line = (
        "21:15:38.480 | INFO    | pbg_core.session.build - memory plan: 6 of 8 partitions resident + 2 in flight "
        "x 2.49 GB, model 0.00 GB, edges 0.14 GB, overhead 1.5 GiB = 21.67 GB of 23.71 GB available (MemAvailable)"
    )
    plan = livejournal.memory_plan("before\n" + line + "\nafter")
    assert plan is not None
    assert (plan["resident"], plan["partitions"], plan["in_flight"]) == (6, 8, 2)
    assert (plan["total_bytes"], plan["available_bytes"]) == (21_670_000_000, 23_710_000_000)
    assert livejournal.memory_plan("no plan here") is None


def test_config_is_pbgs_livejournal_model_at_8_partitions(tmp_path: Path) -> None:
    path = tmp_path / "config.py"
    livejournal.write_config(path, livejournal.config_dict(["edges/train"], 0.0, 2.0, 2))
    namespace: dict = {}
    exec(path.read_text(), namespace)  # the file both tools load
    config = namespace["get_torchbiggraph_config"]()
    assert config["entities"] == {"user_id": {"num_partitions": 8}}
    assert config["relations"] == [{"name": "follow", "lhs": "user_id", "rhs": "user_id", "operator": "none"}]
    expected = {"dimension": 1024, "lr": 0.001, "comparator": "cos", "loss_fn": "ranking", "batch_size": 1000}
    assert {k: config[k] for k in expected} == expected
    assert (config["num_batch_negs"], config["num_uniform_negs"], config["bucket_order"]) == (50, 50, "inside_out")
    assert (config["eval_fraction"], config["num_epochs"], config["hogwild_delay"]) == (0.0, 1, 2.0)
    assert parse_config(config).dimension == 1024  # our loader accepts every key


def test_full_size_needs_about_49_gb() -> None:
    params = chung_lu.scaled(1.0, 0)
    needed = livejournal.bytes_needed(params.nodes, params.edges, have_graph=False, have_import=False)
    assert needed["checkpoint_two_versions"] == 2 * 4_847_571 * 1025 * 4
    assert 48e9 < sum(needed.values()) < 50e9
    cached = livejournal.bytes_needed(params.nodes, params.edges, have_graph=True, have_import=True)
    assert cached["tsv"] == cached["imported_edges"] == 0


def test_short_disk_is_refused_naming_bytes_needed_and_free(tmp_path: Path) -> None:
    free = shutil.disk_usage(tmp_path).free
    assert livejournal.check_free_space(tmp_path, {"checkpoint_two_versions": 1}) is None
    refusal = livejournal.check_free_space(tmp_path, {"tsv": free, "checkpoint_two_versions": free})
    assert refusal is not None and "\n" not in refusal
    # The free figure moves while other processes write: only its shape is checked.
    assert f"{2 * free / 1e9:.1f} GB needed (tsv {free / 1e9:.1f} GB," in refusal
    assert re.search(r"\), [0-9.]+ GB free$", refusal)
