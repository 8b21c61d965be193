"""The ``pbg`` flow with num_machines = 2: buckets on the workers of a real Dask cluster.

A LocalCluster of 2 worker processes on 127.0.0.1 (the flow's own, without a dask_address)
and a cluster of command-line ``dask scheduler`` / ``dask worker`` processes (with one), on the
4x4-partitioned planted graph of tests/conftest.py, seeded, one HOGWILD worker per machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from flows.evaluate import pbg_eval
from flows.train import pbg
from pbg_core.config import parse_config
from pbg_core.types import Bucket
from storage.checkpoints import CheckpointStore

RANDOM_MRR_50 = sum(1 / rank for rank in range(1, 51)) / 50  # ranked among one partition's 50 nodes


def bucket_rows(checkpoint: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (checkpoint / "training_stats.json").read_text().splitlines()]
    return [row for row in rows if "eval_stats_chunk_avg" not in row]


@pytest.fixture
def cluster_config(make_config: Any, graph_4x4: Any) -> dict[str, Any]:
    return make_config("ckpt", data=graph_4x4, num_epochs=2, num_machines=2)


@pytest.mark.slow
def test_two_local_machines_train_every_bucket_of_every_epoch_and_commit_each(cluster_config: dict[str, Any]) -> None:
    result = pbg(config=parse_config(cluster_config))
    checkpoint = Path(cluster_config["checkpoint_path"])
    assert result["version"] == 2
    rows = bucket_rows(checkpoint)
    assert len(rows) == 2 * 16 and sorted(r["index"] for r in rows) == list(range(32))
    for epoch in range(2):
        buckets = sorted(Bucket(r["lhs_partition"], r["rhs_partition"]) for r in rows if r["epoch_idx"] == epoch)
        assert buckets == [Bucket(lhs, rhs) for lhs in range(4) for rhs in range(4)]
    assert len({r["machine"] for r in rows}) == 2  # both machines trained
    store = CheckpointStore(str(checkpoint))
    assert store.read_version() == 2
    for part in range(4):
        embeddings, _ = store.load_embeddings("node", part, 2)
        assert embeddings.shape[1] == 16 and torch.isfinite(embeddings).all()
    assert not (checkpoint / "progress").exists() or not any((checkpoint / "progress").iterdir())
    iterations = result["iterations"]
    assert all({b["machine"] for b in it["buckets"]} <= {r["machine"] for r in rows} for it in iterations)


@pytest.mark.slow
def test_two_machines_rank_test_edges_as_well_as_one(cluster_config: dict[str, Any], graph_4x4: Any) -> None:
    relations = [{**rel, "all_negs": True} for rel in cluster_config["relations"]]
    mrr = {}
    for machines in (1, 2):
        config = {
            **cluster_config,
            "checkpoint_path": f"{cluster_config['checkpoint_path']}-{machines}",
            "num_epochs": 3,
        }
        pbg(config=parse_config({**config, "num_machines": machines}))
        evaluation = {**config, "edge_paths": [graph_4x4.test_path], "relations": relations}
        mrr[machines] = pbg_eval(config=parse_config(evaluation))["mrr"]
    # all_negs ranks against the true entity's partition: 50 nodes, chance ~0.09.
    assert mrr[1] > 3 * RANDOM_MRR_50
    assert mrr[2] > mrr[1] - 0.05, mrr
