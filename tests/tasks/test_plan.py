"""``check_inputs`` and ``plan_training``: input validation, edge-chunk count, resume point (task bodies via ``.fn()``)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from pbg_core.config import parse_config
from pbg_core.ports import CheckpointMetadata
from storage.checkpoints import CheckpointStore
from storage.errors import BadDataError, DataNotFound
from tasks.plan import check_inputs, plan_training
from tasks.runs import open_run

META = CheckpointMetadata(config_json="")  # no recorded config: nothing to compare


def commit(config: dict[str, Any], version: int) -> None:
    """``version`` of the planted graph's checkpoint committed with all its files (200 x 16 and a model)."""
    store = CheckpointStore(config["checkpoint_path"])
    store.save_embeddings("node", 0, version, torch.zeros(200, 16), None, META)
    store.save_model(version, {}, {}, None, META)
    store.write_version(version)


def test_fresh_run_plans_every_epoch(make_config: Any) -> None:
    plan = plan_training.fn(open_run(parse_config(make_config(num_epochs=3))))
    assert plan.num_edge_chunks == 1
    assert plan.committed_version == 0
    assert plan.total_iterations == 3
    assert [it.version for it in plan.remaining] == [1, 2, 3]
    assert [it.epoch_idx for it in plan.remaining] == [0, 1, 2]
    assert plan.remaining[1].label == "epoch 2/3, path 1/1, chunk 1/1"


def test_edge_chunks_come_from_max_edges_per_chunk(make_config: Any, graph: Any) -> None:
    # Bucket (0, 0) holds all 1,600 training edges: ceil(1600 / 500) = 4 chunks.
    config = make_config(num_epochs=2, max_edges_per_chunk=500, edge_paths=[graph.train_path, graph.test_path])
    plan = plan_training.fn(open_run(parse_config(config)))
    assert plan.num_edge_chunks == 4
    assert plan.total_iterations == 2 * 2 * 4
    steps = [(it.epoch_idx, it.edge_path_idx, it.edge_chunk_idx) for it in plan.remaining]
    assert steps[:5] == [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 1, 0)]
    assert steps[-1] == (1, 1, 3)
    assert [it.edge_path for it in plan.remaining[3:5]] == [graph.train_path, graph.test_path]


def test_configured_num_edge_chunks_wins(make_config: Any) -> None:
    config = parse_config(make_config(num_epochs=1, num_edge_chunks=3, max_edges_per_chunk=10))
    plan = plan_training.fn(open_run(config))
    assert plan.num_edge_chunks == 3
    assert [it.edge_chunk_idx for it in plan.remaining] == [0, 1, 2]


def test_resume_skips_committed_iterations(make_config: Any) -> None:
    config = make_config(num_epochs=4)
    commit(config, 2)
    plan = plan_training.fn(open_run(parse_config(config)))
    assert plan.committed_version == 2
    assert [(it.index, it.version, it.epoch_idx) for it in plan.remaining] == [(2, 3, 2), (3, 4, 3)]


def test_checkpoint_beyond_the_config_plans_nothing_and_warns(
    make_config: Any, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(num_epochs=2)
    commit(config, 5)
    with caplog.at_level(logging.WARNING, logger="tasks"):
        plan = plan_training.fn(open_run(parse_config(config)))
    assert plan.remaining == []
    assert plan.committed_version == 5 and plan.total_iterations == 2
    assert any("version 5" in record.getMessage() for record in caplog.records)


def test_missing_bucket_files_are_all_named_before_anything_is_written(
    graph_2x2: Any, make_config: Any, tmp_path: Path
) -> None:
    shutil.copytree(graph_2x2.entity_path, tmp_path / "data")
    train = tmp_path / "data" / Path(graph_2x2.train_path).name
    (train / "edges_1_0.h5").unlink()
    (train / "edges_1_1.h5").unlink()
    config = make_config(data=graph_2x2, entity_path=str(tmp_path / "data"), edge_paths=[str(train)])
    with pytest.raises(DataNotFound) as raised:
        plan_training.fn(open_run(parse_config(config)))
    message = str(raised.value)
    assert "2 edge bucket file(s) missing" in message and "2x2" in message
    assert f"{train}/edges_1_0.h5" in message
    assert f"{train}/edges_1_1.h5" in message
    assert "edges_0_1.h5" not in message
    assert not Path(config["checkpoint_path"]).exists()


def test_unreadable_first_bucket_is_a_clear_error(graph: Any, make_config: Any, tmp_path: Path) -> None:
    shutil.copytree(graph.entity_path, tmp_path / "data")
    train = tmp_path / "data" / Path(graph.train_path).name
    (train / "edges_0_0.h5").write_bytes(b"garbage, not HDF5")
    config = make_config(entity_path=str(tmp_path / "data"), edge_paths=[str(train)])
    with pytest.raises(BadDataError) as raised:
        plan_training.fn(open_run(parse_config(config)))
    assert "edges_0_0.h5" in str(raised.value)
    assert not Path(config["checkpoint_path"]).exists()


def test_the_plan_under_the_lease_reads_the_checkpoint_not_the_inputs_again(make_config: Any, tmp_path: Path) -> None:
    # The flow checks the inputs once, before the lease, and plans under it with the chunk count.
    config = make_config(num_epochs=2, max_edges_per_chunk=500)
    shutil.copytree(Path(config["entity_path"]), tmp_path / "data")
    edges = tmp_path / "data" / Path(config["edge_paths"][0]).name
    run = open_run(parse_config({**config, "entity_path": str(tmp_path / "data"), "edge_paths": [str(edges)]}))
    chunks = check_inputs.fn(run)
    assert chunks == 4  # 1,600 edges in bucket (0, 0)
    commit(config, 3)  # another run committed meanwhile
    shutil.rmtree(edges)  # not looked at again: planning reads only the checkpoint
    plan = plan_training.fn(run, chunks)
    assert (plan.num_edge_chunks, plan.committed_version, plan.total_iterations) == (4, 3, 8)
    assert [it.version for it in plan.remaining] == [4, 5, 6, 7, 8]
    with pytest.raises(DataNotFound, match="edge bucket file"):
        plan_training.fn(run)  # without the count it checks the inputs first
