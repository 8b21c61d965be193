"""Bucket steps and bucket-level resume: a crash loses at most the bucket in flight.

Runs the task bodies (``.fn()``) on the 2x2-partitioned planted graph with one worker
and a seed, so an interrupted-then-resumed pass must end bit-identical to an
uninterrupted one: resuming reloads partitions, Adagrad state and model exactly as
the last finished bucket left them, and retrains only the buckets not recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pbg_core.config import parse_config
from storage.fs import reads
from tasks.buckets import (
    evaluate_bucket,
    finish_bucket,
    load_edges,
    schedule_buckets,
    swap_partitions,
    train_bucket,
)
from tasks.checkpoint import remove_old_version, switch_version, write_checkpoint
from tasks.plan import plan_training
from tasks.runs import open_run
from tasks.sessions import close_training_session, get_session, open_training_session


def run_buckets(handle: str, iteration: Any, stop_after: int | None = None, crash_in_flight: bool = False) -> list[Any]:
    """Train the scheduled buckets; stop after ``stop_after`` finished ones (optionally
    training one more bucket without finishing it, as a crash mid-bucket would)."""
    trained = []
    for number, bucket in enumerate(schedule_buckets.fn(handle, iteration)):
        if stop_after is not None and number == stop_after:
            if crash_in_flight:
                swap_partitions.fn(handle, bucket)
                load_edges.fn(handle, bucket)
                train_bucket.fn(handle)
            break
        swap_partitions.fn(handle, bucket)
        load_edges.fn(handle, bucket)
        evaluate_bucket.fn(handle, "before")
        train_bucket.fn(handle)
        evaluate_bucket.fn(handle, "after")
        finish_bucket.fn(handle)
        trained.append(tuple(bucket))
    return trained


def commit(handle: str, iteration: Any) -> None:
    write_checkpoint.fn(handle, iteration)
    switch_version.fn(handle, iteration)
    remove_old_version.fn(handle, iteration)


def stats_indices(checkpoint: str) -> list[int]:
    rows = [json.loads(line) for line in reads.read_text(f"{checkpoint}/training_stats.json").splitlines()]
    return [row["index"] for row in rows if "stats" in row]


@pytest.fixture
def config_2x2(make_config: Any, graph_2x2: Any) -> Any:
    def make(name: str, checkpoint_root: str | None = None) -> Any:
        config = make_config(name, data=graph_2x2, num_epochs=2)
        if checkpoint_root is not None:
            config["checkpoint_path"] = f"{checkpoint_root}/{name}"
        return parse_config(config)

    return make


def datasets(url: str, h5_datasets: Any) -> dict[str, Any]:
    """Every dataset of the HDF5 file at ``url`` (local path or s3://)."""
    with reads.local_read_path(url) as path:
        return h5_datasets(Path(path))


def listing(url: str) -> list[str]:
    return [name for name in reads.listdir(url) if name.endswith(".h5")]


def train_uninterrupted(config: Any) -> None:
    handle = open_training_session.fn(open_run(config))
    try:
        for iteration in plan_training.fn(open_run(config)).remaining:
            run_buckets(handle, iteration)
            commit(handle, iteration)
    finally:
        close_training_session.fn(handle)


@pytest.mark.parametrize(
    ("stop_after", "in_flight", "where"),
    [(1, False, "local"), (2, True, "local"), (3, True, "s3"), (4, False, "local")],
)
def test_resume_inside_a_pass_is_bit_identical(
    config_2x2: Any, h5_datasets: Any, stop_after: int, in_flight: bool, where: str, request: pytest.FixtureRequest
) -> None:
    root = f"s3://{request.getfixturevalue('s3_bucket')}" if where == "s3" else None
    reference, resumed = config_2x2("reference"), config_2x2("resumed", root)
    train_uninterrupted(reference)

    first, second = plan_training.fn(open_run(resumed)).remaining
    handle = open_training_session.fn(open_run(resumed))
    try:
        run_buckets(handle, first)
        commit(handle, first)
        done = run_buckets(handle, second, stop_after=stop_after, crash_in_flight=in_flight)
    finally:
        close_training_session.fn(handle)  # the "crash": nothing after the last finished bucket
    assert len(done) == stop_after
    progress = json.loads(reads.read_text(f"{resumed.checkpoint_path}/progress/v2.json"))
    assert progress["done"] == stop_after

    (again,) = plan_training.fn(open_run(resumed)).remaining
    handle = open_training_session.fn(open_run(resumed))
    try:
        retrained = run_buckets(handle, again)
        assert len(retrained) == 4 - stop_after  # only the buckets not recorded as done
        commit(handle, again)
    finally:
        close_training_session.fn(handle)

    ref_dir, res_dir = reference.checkpoint_path, resumed.checkpoint_path
    for name in ("embeddings_node_0.v2.h5", "embeddings_node_1.v2.h5", "model.v2.h5"):
        want, got = datasets(f"{ref_dir}/{name}", h5_datasets), datasets(f"{res_dir}/{name}", h5_datasets)
        assert want.keys() == got.keys()
        for key in want:
            assert (want[key] == got[key]).all(), f"{name}:{key} differs after resuming"
    assert sorted(stats_indices(ref_dir)) == sorted(stats_indices(res_dir)) == list(range(8))
    assert not reads.exists(f"{res_dir}/progress")
    assert listing(res_dir) == listing(ref_dir)


def test_stale_progress_of_another_pass_is_discarded(config_2x2: Any) -> None:
    config = config_2x2("stale")
    first, _ = plan_training.fn(open_run(config)).remaining
    handle = open_training_session.fn(open_run(config))
    try:
        run_buckets(handle, first, stop_after=2)
        session = get_session(handle)
        record = Path(config.checkpoint_path) / "progress" / "v1.json"
        data = json.loads(record.read_text())
        data["iteration_index"] = 5  # as if left by a different pass
        record.write_text(json.dumps(data))
        assert len(schedule_buckets.fn(handle, first)) == 4  # starts the pass over
        assert session.residency.locations == {}
        assert not (Path(config.checkpoint_path) / "progress").exists()
    finally:
        close_training_session.fn(handle)


def test_a_record_in_another_order_of_the_same_buckets_is_resumed_in_its_order(config_2x2: Any) -> None:
    """Without a seed each session draws its own bucket order: the rerun must still resume the
    interrupted pass (in the order its saves belong to) instead of starting it over."""
    config = config_2x2("reordered")
    first, _ = plan_training.fn(open_run(config)).remaining
    handle = open_training_session.fn(open_run(config))
    try:
        done = run_buckets(handle, first, stop_after=2)
    finally:
        close_training_session.fn(handle)
    record = Path(config.checkpoint_path) / "progress" / "v1.json"
    data = json.loads(record.read_text())
    order = [tuple(bucket) for bucket in data["order"]]
    assert [tuple(bucket) for bucket in order[:2]] == done
    data["order"] = [*data["order"][:2], data["order"][3], data["order"][2]]  # as another seed would draw
    record.write_text(json.dumps(data))

    handle = open_training_session.fn(open_run(config))
    try:
        remaining = [tuple(bucket) for bucket in schedule_buckets.fn(handle, first)]
        assert remaining == [order[3], order[2]]  # the record's order, after its two done buckets
        assert get_session(handle).residency.locations != {}  # the saved partitions were restored
    finally:
        close_training_session.fn(handle)


def test_finish_bucket_is_idempotent_and_prunes_superseded_saves(config_2x2: Any) -> None:
    config = config_2x2("prune")
    first, _ = plan_training.fn(open_run(config)).remaining
    handle = open_training_session.fn(open_run(config))
    try:
        run_buckets(handle, first, stop_after=3)
        again = finish_bucket.fn(handle)  # a retry after success
        assert again["saved"] == []
        progress_dir = Path(config.checkpoint_path) / "progress"
        record = json.loads((progress_dir / "v1.json").read_text())
        referenced = {f"v1-b{where}" for _, _, where in record["partitions"] if where >= 0}
        if record["model"] is not None and record["model"] >= 0:
            referenced.add(f"v1-b{record['model']}")
        areas = {p.name for p in progress_dir.iterdir() if p.is_dir()}
        assert areas == referenced  # every area still on disk is referenced, and vice versa
        assert record["done"] == 3 and len(record["rows"]) == 3
    finally:
        close_training_session.fn(handle)


def test_an_unchanged_chunk_is_kept_and_a_replaced_one_read_again(make_config: Any) -> None:
    """One bucket, one chunk: every epoch trains the same edges, read once while the file is unchanged."""
    config = parse_config(make_config("reuse", num_epochs=3))
    first, second, third = plan_training.fn(open_run(config)).remaining
    handle = open_training_session.fn(open_run(config))
    try:
        session = get_session(handle)
        run_buckets(handle, first)
        kept = session.loaded.edges
        run_buckets(handle, second)
        assert session.loaded.edges is kept  # not read again

        # A re-import replaces the file (rename over it): the next iteration reads the new one.
        source = session.edge_sources[0]
        (bucket,) = [b for b in source.list_buckets()]
        replacement = kept[torch.arange(len(kept) - 1, -1, -1)]  # the same edges, reversed
        source.save(bucket, replacement)
        schedule_buckets.fn(handle, third)
        swap_partitions.fn(handle, bucket)
        load_edges.fn(handle, bucket)
        assert session.loaded.edges is not kept
        assert session.loaded.edges == replacement
    finally:
        close_training_session.fn(handle)
