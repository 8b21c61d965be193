"""pbg_core.session.engine: a TrainingSession driven step by step on a real 2x2 partitioned graph.

The flows drive the same steps as Prefect tasks; here the steps are called directly, so a
failure names the step. One worker (this process), seeded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from _sessions import first_iteration, open_session, train_bucket

from pbg_core.errors import TrainingDivergedError
from pbg_core.ports import FINAL
from pbg_core.session.engine import TrainingSession
from pbg_core.types import Bucket
from storage.checkpoints import CheckpointStore
from storage.progress import CheckpointProgress


def resident_rows(session: TrainingSession) -> dict[tuple[str, int], torch.Tensor]:
    """A copy of every resident partition's embeddings."""
    return {key: handle.embeddings.clone() for key, handle in session.residency.resident.items()}


@pytest.fixture
def raw(make_config: Any, graph_2x2: Any) -> dict[str, Any]:
    """2 partitions of ``node`` (a 2x2 bucket grid), one epoch, 10% held out."""
    return make_config("ckpt", data=graph_2x2, num_epochs=1)


def test_training_a_bucket_changes_only_its_partitions_and_finish_saves_them(raw: dict[str, Any]) -> None:
    config, session = open_session(raw)
    try:
        iteration = first_iteration(config)
        buckets = session.schedule_buckets(iteration)
        assert sorted(buckets) == [Bucket(0, 0), Bucket(0, 1), Bucket(1, 0), Bucket(1, 1)]
        bucket = buckets[0]
        assert bucket == Bucket(1, 1)  # inside_out: the highest layer first; one partition of the two
        session.swap_partitions(bucket)
        session.residency.ensure_resident([("node", 1 - bucket.lhs)])  # the other one, to watch
        loaded = session.load_edges(bucket)
        assert loaded["train"] + loaded["eval"] == loaded["edges"] > 0
        assert loaded["eval"] == int(loaded["edges"] * 0.1)
        before = resident_rows(session)
        stats = session.train()
        after = resident_rows(session)
        assert stats["count"] == loaded["train"]
        assert not torch.equal(before["node", bucket.lhs], after["node", bucket.lhs])
        assert torch.equal(before["node", 1 - bucket.lhs], after["node", 1 - bucket.lhs])
        assert session.residency.dirty == {("node", bucket.lhs)}
        done = session.finish_bucket()
        assert done["saved"] == [f"node/{bucket.lhs}"] and done["row"]["index"] == 0
        record = CheckpointProgress(CheckpointStore(config.checkpoint_path)).read(iteration.version)
        assert record is not None and record.done == 1 and record.order == buckets
        assert record.partitions == {("node", bucket.lhs): 0}  # saved in bucket 0's progress area
        assert session.finish_bucket()["saved"] == []  # a retried step does nothing
    finally:
        session.close()


def test_steps_called_out_of_order_name_the_missing_step(raw: dict[str, Any]) -> None:
    config, session = open_session(raw)
    try:
        with pytest.raises(RuntimeError, match=r"no iteration is open: call schedule_buckets\(iteration\) first"):
            session.load_edges(Bucket(0, 0))
        session.schedule_buckets(first_iteration(config))
        with pytest.raises(RuntimeError, match=r"no edges are loaded: call load_edges\(bucket\) first"):
            session.train()
        with pytest.raises(RuntimeError, match=r"no bucket is open: call swap_partitions\(bucket\) first"):
            session.finish_bucket()
        session.swap_partitions(Bucket(1, 0))
        session.load_edges(Bucket(1, 0))
        with pytest.raises(RuntimeError, match=re.escape(f"bucket {Bucket(1, 0)} is not trained: call train() first")):
            session.finish_bucket()
    finally:
        session.close()


def test_a_whole_pass_commits_a_version_holding_what_memory_holds(raw: dict[str, Any]) -> None:
    config, session = open_session(raw)
    iteration = first_iteration(config)
    try:
        for bucket in session.schedule_buckets(iteration):
            train_bucket(session, bucket)
        memory = resident_rows(session)
        assert session.write_checkpoint(iteration) == 1
        assert session.switch_version(iteration) == 1
        assert session.write_checkpoint(iteration) == 1  # already committed: a retried step
    finally:
        session.close()
    store = CheckpointStore(config.checkpoint_path)
    assert store.read_version() == 1
    for key, rows in memory.items():
        assert torch.equal(store.load_embeddings(*key, 1)[0], rows)
    stats = [
        json.loads(line) for line in (Path(config.checkpoint_path) / "training_stats.json").read_text().splitlines()
    ]
    assert [row["index"] for row in stats if "stats" in row] == [0, 1, 2, 3]
    assert "eval_stats_chunk_avg" in stats[-1]
    assert CheckpointProgress(store).read(1) is None  # progress cleared once the pointer is written


def test_a_new_session_resumes_after_the_last_finished_bucket(raw: dict[str, Any]) -> None:
    config, session = open_session(raw)
    iteration = first_iteration(config)
    try:
        order = session.schedule_buckets(iteration)
        train_bucket(session, order[0])
        trained = resident_rows(session)[("node", order[0].lhs)]
    finally:
        session.close()  # a crash after the first bucket: nothing committed
    _, again = open_session(raw)
    try:
        assert again.schedule_buckets(iteration) == order[1:]
        assert again.progress is not None and again.progress.done == 1
        again.swap_partitions(order[0])
        assert torch.equal(again.residency.handle(("node", order[0].lhs)).embeddings, trained)
        assert again.model_where in (0, FINAL)
    finally:
        again.close()


def test_a_diverging_loss_stops_naming_the_bucket_and_the_intact_version(raw: dict[str, Any]) -> None:
    config, session = open_session({**raw, "lr": 1e30, "loss_fn": "ranking", "comparator": "dot", "init_scale": 10.0})
    try:
        iteration = first_iteration(config)
        bucket = session.schedule_buckets(iteration)[0]
        session.swap_partitions(bucket)
        session.load_edges(bucket)
        with pytest.raises(
            TrainingDivergedError,
            match=rf"loss became .* while training bucket {re.escape(str(bucket))}.*version 0, left intact",
        ):
            session.train()
        assert session.residency.dirty == set()  # nothing of the bucket is marked to save
    finally:
        session.close()
