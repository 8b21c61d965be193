"""The ``pbg`` training flow end to end, in-process under the Prefect test harness.

Every run is seeded, uses 1 HOGWILD worker (bit-reproducible) and the planted-cluster graph
of ``tests/conftest.py``: 200 nodes, 1,600 training edges, a few epochs.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import pbg_core.config.schema
import pbg_core.config.validation
import tasks.config
import tasks.runs
from flows.evaluate import pbg_eval
from flows.train import pbg
from pbg_core.config import parse_config
from pbg_core.errors import TrainingDivergedError
from pbg_core.types import Bucket
from storage.errors import DataNotFound, StorageError

NUM_NODES = 200
# Raw all_negs MRR of random scores: the true entity is ranked uniformly among all nodes.
RANDOM_MRR = sum(1 / rank for rank in range(1, NUM_NODES + 1)) / NUM_NODES  # ~0.029


def eval_config(config: dict[str, Any], edge_path: str) -> Any:
    """Rank ``edge_path`` against every node (all_negs) with ``config``'s checkpoint."""
    relations = [{**rel, "all_negs": True} for rel in config["relations"]]
    return parse_config({**config, "edge_paths": [edge_path], "relations": relations, "num_uniform_negs": 0})


def stats_rows(checkpoint: Path) -> list[dict[str, Any]]:
    """training_stats.json as a list of rows, in file order."""
    return [json.loads(line) for line in (checkpoint / "training_stats.json").read_text().splitlines()]


def bucket_rows(checkpoint: Path) -> list[dict[str, Any]]:
    """The per-bucket rows (not the per-iteration eval summaries)."""
    return [row for row in stats_rows(checkpoint) if "eval_stats_chunk_avg" not in row]


def checkpoint_files(checkpoint: Path) -> set[str]:
    """Names of the versioned files (embeddings and model) in a checkpoint dir."""
    return {p.name for p in checkpoint.iterdir() if p.suffix == ".h5"}


def version_of(checkpoint: Path) -> int:
    """The committed version pointer."""
    return int((checkpoint / "checkpoint_version.txt").read_text())


def test_a_run_parses_its_config_once_and_opens_its_stores_once(
    graph: Any, config_for: Any, tmp_path: Path, calls_of: Any
) -> None:
    """The config parsed by the caller reaches every task as is; the run's stores are opened once."""
    config = parse_config(config_for(graph, tmp_path / "ckpt", num_epochs=2))
    opens = calls_of(tasks.runs, "open_run_stores")
    parses = calls_of(tasks.config, "parse_config")
    # The cross-field rules run in every validation (schema) and every parse (validation).
    validations = calls_of(pbg_core.config.schema, "cross_field_problems")
    validations_in_parses = calls_of(pbg_core.config.validation, "cross_field_problems")
    assert pbg(config=config)["version"] == 2
    assert len(opens) == 1 and opens[0][0] is config  # the caller's object, not a copy parsed again
    assert parses == []
    # Prefect's validation of the flow's parameters runs the model's cross-field rules on the
    # instance (the object itself passes through): the check a deployed run's dict parameter gets.
    assert len(validations) == 1 and validations_in_parses == []


# ---- a finished run resumed with more epochs; MRR before vs after training -------------


@pytest.fixture(scope="module")
def resumed(graph: Any, config_for: Any, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """2 epochs with lr=0 (embeddings stay at their random init), then rerun to 4 epochs, lr 0.1."""
    checkpoint = tmp_path_factory.mktemp("resumed") / "ckpt"
    first = config_for(graph, checkpoint, num_epochs=2, lr=0.0)
    first_result = pbg(config=parse_config(first))
    rows_after_first = stats_rows(checkpoint)
    mrr_before = pbg_eval(config=eval_config(first, graph.test_path))["mrr"]
    second = config_for(graph, checkpoint, num_epochs=4)
    second_result = pbg(config=parse_config(second))
    mrr_after = pbg_eval(config=eval_config(second, graph.test_path))["mrr"]
    return SimpleNamespace(
        checkpoint=checkpoint,
        first=first_result,
        second=second_result,
        rows_after_first=rows_after_first,
        mrr_before=mrr_before,
        mrr_after=mrr_after,
    )


def test_rerun_with_more_epochs_continues_from_the_committed_version(resumed: SimpleNamespace) -> None:
    assert resumed.first["version"] == 2
    assert [it["version"] for it in resumed.first["iterations"]] == [1, 2]
    assert resumed.second["version"] == 4
    assert [it["version"] for it in resumed.second["iterations"]] == [3, 4]
    assert version_of(resumed.checkpoint) == 4
    assert checkpoint_files(resumed.checkpoint) == {"embeddings_node_0.v4.h5", "model.v4.h5"}


def test_resumed_stats_have_one_row_per_bucket_index(resumed: SimpleNamespace) -> None:
    rows = bucket_rows(resumed.checkpoint)
    assert [row["index"] for row in rows] == [0, 1, 2, 3]
    assert [row["epoch_idx"] for row in rows] == [0, 1, 2, 3]
    summaries = [row for row in stats_rows(resumed.checkpoint) if "eval_stats_chunk_avg" in row]
    assert [row["index"] for row in summaries] == [0, 1, 2, 3]
    # The rerun appended epochs 3-4 and left the rows of epochs 1-2 as they were.
    assert stats_rows(resumed.checkpoint)[: len(resumed.rows_after_first)] == resumed.rows_after_first


def test_training_raises_held_out_mrr_well_above_random(resumed: SimpleNamespace) -> None:
    # Untrained (lr=0) embeddings rank test edges like chance; trained ones find the clusters.
    assert resumed.mrr_before < 2 * RANDOM_MRR
    assert resumed.mrr_after > 4 * RANDOM_MRR
    assert resumed.mrr_after > 3 * resumed.mrr_before


def test_in_training_holdout_mrr_improves(resumed: SimpleNamespace) -> None:
    rows = bucket_rows(resumed.checkpoint)
    untrained = rows[2]["eval_stats_before"]["metrics"]["mrr"]  # first bucket trained with lr 0.1
    trained = rows[3]["eval_stats_after"]["metrics"]["mrr"]
    assert trained > 2 * untrained
    assert rows[3]["eval_stats_after"]["count"] == round(0.1 * 1600)


# ---- interruption inside an iteration: divergence -----------------------------------------


@pytest.mark.slow
def test_diverged_iteration_keeps_the_committed_version_then_a_fixed_rerun_completes(
    trained: Any, make_config: Any, h5_datasets: Any, tmp_path: Path
) -> None:
    # Continue a copy of a finished 3-epoch run: epoch 4 diverges, then a sane lr finishes it.
    config = make_config(num_epochs=4)
    checkpoint = Path(config["checkpoint_path"])
    shutil.copytree(trained.checkpoint, checkpoint)
    committed = {name: h5_datasets(checkpoint / name) for name in checkpoint_files(checkpoint)}
    assert set(committed) == {"embeddings_node_0.v3.h5", "model.v3.h5"}

    with pytest.raises(TrainingDivergedError) as raised:
        pbg(config=parse_config({**config, "lr": 1e30}))
    message = str(raised.value)
    assert f"bucket {Bucket(0, 0)}" in message
    assert "epoch 4/4" in message
    assert "version 3" in message
    assert version_of(checkpoint) == 3
    for name, datasets in committed.items():
        now = h5_datasets(checkpoint / name)
        assert now.keys() == datasets.keys()
        for key, value in datasets.items():
            assert now[key].tobytes() == value.tobytes(), f"{name}:{key} changed by the failed run"

    result = pbg(config=parse_config(config))
    assert result["version"] == 4
    assert [it["version"] for it in result["iterations"]] == [4]
    assert checkpoint_files(checkpoint) == {"embeddings_node_0.v4.h5", "model.v4.h5"}
    assert [row["index"] for row in bucket_rows(checkpoint)] == [0, 1, 2, 3]
    assert all(math.isfinite(row["stats"]["metrics"]["loss"]) for row in bucket_rows(checkpoint))


@pytest.mark.slow
def test_a_failed_iteration_fails_the_run_with_its_error_and_no_later_iteration_starts(
    make_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each iteration's subflow is created once the previous one has ended (flows/train.py): after
    # a failed one, none is created.
    from pbg_core.session.engine import TrainingSession

    original = TrainingSession.write_checkpoint

    def write_checkpoint(self: TrainingSession, iteration: Any) -> int:
        if iteration.version == 2:
            raise ValueError("disk said no to version 2")
        return original(self, iteration)

    monkeypatch.setattr(TrainingSession, "write_checkpoint", write_checkpoint)
    config = make_config(num_epochs=4)
    state = pbg(config=parse_config(config), return_state=True)
    assert state.is_failed()
    with pytest.raises(ValueError, match="disk said no to version 2"):
        state.result()
    assert version_of(Path(config["checkpoint_path"])) == 1
    assert subflow_states(state.state_details.flow_run_id) == {
        "epoch 1/4, path 1/1, chunk 1/1": "COMPLETED",
        "epoch 2/4, path 1/1, chunk 1/1": "FAILED",
    }


def subflow_states(parent_id: Any) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id]))
        )
    return {run.name: run.state.type.value for run in runs}


# ---- bad inputs fail before training --------------------------------------------------------


def copy_data(graph: Any, root: Path) -> SimpleNamespace:
    """A private copy of the imported entity dir and train edge path."""
    shutil.copytree(graph.entity_path, root / "data")
    train = root / "data" / Path(graph.train_path).name
    return SimpleNamespace(entity_path=str(root / "data"), train_path=str(train))


def test_missing_bucket_file_fails_before_anything_is_written(graph: Any, make_config: Any, tmp_path: Path) -> None:
    data = copy_data(graph, tmp_path)
    (Path(data.train_path) / "edges_0_0.h5").unlink()
    config = make_config(entity_path=data.entity_path, edge_paths=[data.train_path])
    with pytest.raises(DataNotFound) as raised:
        pbg(config=parse_config(config))
    message = str(raised.value)
    assert data.train_path in message
    assert "edges_0_0.h5" in message
    assert "pbg import" in message
    assert not Path(config["checkpoint_path"]).exists()


# ---- init_path ---------------------------------------------------------------------------------


def test_init_path_starts_from_the_other_checkpoint(trained: Any, make_config: Any, h5_datasets: Any) -> None:
    # lr=0: the one epoch of run B leaves what it loaded unchanged, so B's v1 is what B loaded.
    config = make_config("from_init", init_path=str(trained.checkpoint), lr=0.0, num_epochs=1)
    assert pbg(config=parse_config(config))["version"] == 1
    source_version = version_of(trained.checkpoint)
    checkpoint = Path(config["checkpoint_path"])
    loaded = h5_datasets(checkpoint / "embeddings_node_0.v1.h5")["embeddings"]
    source = h5_datasets(trained.checkpoint / f"embeddings_node_0.v{source_version}.h5")["embeddings"]
    assert loaded.tobytes() == source.tobytes()
    model = h5_datasets(checkpoint / "model.v1.h5")["model/entities/node/global_embedding"]
    source_model = h5_datasets(trained.checkpoint / f"model.v{source_version}.h5")
    assert model.tobytes() == source_model["model/entities/node/global_embedding"].tobytes()
    # The source checkpoint is only read.
    assert checkpoint_files(trained.checkpoint) == {
        f"embeddings_node_0.v{source_version}.h5",
        f"model.v{source_version}.h5",
    }


# ---- partitioned 2x2 training, preservation, determinism, mid-pass interruption ----------------


def config_2x2(config_for: Any, graph_2x2: Any, checkpoint: Path, **overrides: Any) -> dict[str, Any]:
    """2 partitions, a diagonal operator (so the model file has relation parameters)."""
    relations = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "diagonal"}]
    return config_for(
        graph_2x2, checkpoint, num_epochs=2, relations=relations, checkpoint_preservation_interval=1, **overrides
    )


@pytest.fixture(scope="module")
def run_2x2(graph_2x2: Any, config_for: Any, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    checkpoint = tmp_path_factory.mktemp("run2x2") / "ckpt"
    config = config_2x2(config_for, graph_2x2, checkpoint)
    result = pbg(config=parse_config(config))
    return SimpleNamespace(config=config, checkpoint=checkpoint, result=result)


ALL_BUCKETS = {(0, 0), (0, 1), (1, 0), (1, 1)}


def test_2x2_trains_every_bucket_once_per_epoch(run_2x2: SimpleNamespace) -> None:
    rows = bucket_rows(run_2x2.checkpoint)
    assert [row["index"] for row in rows] == list(range(8))
    for epoch in (0, 1):
        epoch_rows = [row for row in rows if row["epoch_idx"] == epoch]
        assert {(row["lhs_partition"], row["rhs_partition"]) for row in epoch_rows} == ALL_BUCKETS
        assert all(row["stats"]["count"] > 0 for row in epoch_rows)
    trained_edges = sum(row["stats"]["count"] for row in rows if row["epoch_idx"] == 0)
    held_out = sum(row["eval_stats_before"]["count"] for row in rows if row["epoch_idx"] == 0)
    assert trained_edges + held_out == 1600


def test_2x2_keeps_only_the_last_version(run_2x2: SimpleNamespace) -> None:
    assert run_2x2.result["version"] == 2
    assert version_of(run_2x2.checkpoint) == 2
    assert checkpoint_files(run_2x2.checkpoint) == {"embeddings_node_0.v2.h5", "embeddings_node_1.v2.h5", "model.v2.h5"}


def test_preservation_interval_keeps_real_epoch_snapshots(run_2x2: SimpleNamespace, h5_datasets: Any) -> None:
    for epoch in (1, 2):
        snapshot = run_2x2.checkpoint / f"epoch_{epoch}"
        assert snapshot.is_dir() and not snapshot.is_symlink()
        assert version_of(snapshot) == epoch
        names = {f"embeddings_node_0.v{epoch}.h5", f"embeddings_node_1.v{epoch}.h5", f"model.v{epoch}.h5"}
        assert checkpoint_files(snapshot) == names
        for name in names:
            path = snapshot / name
            assert path.is_file() and not path.is_symlink() and path.stat().st_size > 0
    final = h5_datasets(run_2x2.checkpoint / "embeddings_node_0.v2.h5")["embeddings"]
    assert h5_datasets(run_2x2.checkpoint / "epoch_2" / "embeddings_node_0.v2.h5")["embeddings"].tobytes() == (
        final.tobytes()
    )
    # epoch_1 holds the state after the first epoch, which the second epoch then changed.
    assert h5_datasets(run_2x2.checkpoint / "epoch_1" / "embeddings_node_0.v1.h5")["embeddings"].tobytes() != (
        final.tobytes()
    )


def test_2x2_checkpoint_evaluates(run_2x2: SimpleNamespace, graph_2x2: Any) -> None:
    metrics = pbg_eval(config=eval_config(run_2x2.config, graph_2x2.test_path))
    assert metrics["count"] == graph_2x2.num_test_edges
    # Negatives are the nodes of the true entity's partition (~100), so chance is ~0.05.
    assert metrics["mrr"] > 0.15


def assert_same_checkpoint(a: Path, b: Path, version: int, h5_datasets: Any) -> None:
    names = checkpoint_files(a)
    assert names == checkpoint_files(b)
    assert f"model.v{version}.h5" in names
    for name in sorted(names):
        left, right = h5_datasets(a / name), h5_datasets(b / name)
        assert left.keys() == right.keys(), name
        for key in left:
            assert left[key].tobytes() == right[key].tobytes(), f"{name}:{key} differs"


@pytest.mark.slow
def test_same_seed_and_one_worker_is_bit_reproducible(
    run_2x2: SimpleNamespace, graph_2x2: Any, config_for: Any, tmp_path: Path, h5_datasets: Any
) -> None:
    config = config_2x2(config_for, graph_2x2, tmp_path / "again")
    pbg(config=parse_config(config))
    assert_same_checkpoint(run_2x2.checkpoint, tmp_path / "again", 2, h5_datasets)


def test_crash_mid_pass_then_rerun_equals_an_uninterrupted_run(
    run_2x2: SimpleNamespace, graph_2x2: Any, config_for: Any, tmp_path: Path, h5_datasets: Any
) -> None:
    data = copy_data(graph_2x2, tmp_path)
    checkpoint = tmp_path / "ckpt"
    config = config_2x2(config_for, graph_2x2, checkpoint, entity_path=data.entity_path, edge_paths=[data.train_path])
    pbg(config=parse_config({**config, "num_epochs": 1}))
    committed = {name: h5_datasets(checkpoint / name) for name in checkpoint_files(checkpoint)}

    # Break a bucket file: the run stops before training anything (its files are checked first).
    last = bucket_rows(run_2x2.checkpoint)[-1]
    bucket_file = Path(data.train_path) / f"edges_{last['lhs_partition']}_{last['rhs_partition']}.h5"
    good = bucket_file.read_bytes()
    bucket_file.write_bytes(b"this is not an HDF5 file")
    with pytest.raises(StorageError) as raised:
        pbg(config=parse_config(config))
    assert bucket_file.name in str(raised.value)
    assert version_of(checkpoint) == 1
    for name, datasets in committed.items():
        now = h5_datasets(checkpoint / name)
        for key, value in datasets.items():
            assert now[key].tobytes() == value.tobytes(), f"{name}:{key} changed by the failed run"

    bucket_file.write_bytes(good)
    result = pbg(config=parse_config(config))
    assert result["version"] == 2
    assert [row["index"] for row in bucket_rows(checkpoint)] == list(range(8))
    assert_same_checkpoint(run_2x2.checkpoint, checkpoint, 2, h5_datasets)
    assert not (checkpoint / "progress").exists() and not (checkpoint / "lease.json").exists()


def test_a_second_run_on_a_held_checkpoint_is_refused_naming_the_holder(
    graph: Any, config_for: Any, tmp_path: Path
) -> None:
    from storage.lease import CheckpointLease, LeaseHeldError

    checkpoint = tmp_path / "held"
    holder = CheckpointLease(str(checkpoint), "the other run", ttl=60)
    holder.acquire()
    try:
        with pytest.raises(LeaseHeldError, match="being written by run 'the other run'"):
            pbg(config=parse_config(config_for(graph, checkpoint, num_epochs=1)))
        assert not (checkpoint / "checkpoint_version.txt").exists() and not list(checkpoint.glob("*.h5"))
    finally:
        holder.release()
    assert pbg(config=parse_config(config_for(graph, checkpoint, num_epochs=1)))["version"] == 1
