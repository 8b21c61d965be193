"""Opening a session: checkpoints that do not fit the config are refused before any training;
the workers get their settings, not the config."""

from __future__ import annotations

import json
import pickle
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.errors import ShapeError
from pbg_core.model.embedder import build_model
from pbg_core.parallel.worker_jobs import WorkerInit
from pbg_core.ports import CheckpointMetadata
from pbg_core.session.build import build_session, worker_settings
from pbg_core.session.memory_plan import MemoryPlanError
from pbg_core.training.settings import BatchSettings, WorkerSettings
from storage.checkpoints import CheckpointStore
from storage.run_stores import open_run_stores
from storage.version_check import IncompleteVersionError

META = CheckpointMetadata(config_json="{}")


def committed(path: Path, shape: tuple[int, int], version: int = 1) -> None:
    store = CheckpointStore(str(path))
    store.save_embeddings("node", 0, version, torch.zeros(shape), None, META)
    store.save_model(version, {}, {}, None, META)
    store.write_version(version)


@pytest.mark.parametrize("shape", [(200, 8), (150, 16)])
def test_a_committed_checkpoint_of_another_shape_is_refused(
    make_config: Any, tmp_path: Path, shape: tuple[int, int]
) -> None:
    config = parse_config(make_config("ckpt"))
    committed(Path(config.checkpoint_path), shape)
    with pytest.raises(ShapeError) as raised:
        build_session(config, open_run_stores(config))
    message = str(raised.value)
    assert config.checkpoint_path in message and "version 1" in message
    assert f"stored shape {shape}" in message and "expects (200, 16)" in message and "\n" not in message


def test_a_committed_checkpoint_missing_a_partition_is_refused(make_config: Any, graph_2x2: Any) -> None:
    config = parse_config(make_config("ckpt", data=graph_2x2))
    store = CheckpointStore(config.checkpoint_path)
    count = len(json.loads((Path(graph_2x2.entity_path) / "entity_names_node_0.json").read_text()))
    store.save_embeddings("node", 0, 1, torch.zeros(count, 16), None, META)
    store.save_model(1, {}, {}, None, META)
    store.write_version(1)
    with pytest.raises(
        IncompleteVersionError, match=r"says 1 but version 1's files are missing \(1 of 3: embeddings_node_1"
    ):
        build_session(config, open_run_stores(config))


def test_an_init_path_of_another_dimension_is_refused(make_config: Any, tmp_path: Path) -> None:
    committed(tmp_path / "init", (200, 4))
    config = parse_config(make_config("ckpt", init_path=str(tmp_path / "init")))
    with pytest.raises(ShapeError, match=r"init.* version 1 does not fit.*stored shape \(200, 4\)"):
        build_session(config, open_run_stores(config))


@pytest.mark.parametrize(
    ("edges", "workers", "expected"),
    [
        (1_592, 2, 1),  # Nations: two batches of 1000 -> one worker
        (15_999, 2, 1),  # just under 8 batches per worker for two
        (16_000, 2, 2),
        (2_000_000, 2, 2),
        (2_000_000, 64, 64),
        (0, 4, 1),
    ],
)
def test_small_buckets_train_on_fewer_workers(edges: int, workers: int, expected: int) -> None:
    from pbg_core.parallel.worker_boot import active_workers

    assert active_workers(edges, 1000, workers) == expected


def test_worker_settings_carry_every_field_a_worker_reads(make_config: Any) -> None:
    """Each field of the config a worker uses lands in its WorkerSettings, with a distinct value."""
    config = parse_config(
        make_config(
            "ckpt",
            batch_size=100,
            num_batch_negs=20,
            num_uniform_negs=7,
            disable_lhs_negs=True,
            max_norm=2.5,
            loss_fn="softmax",
            margin=0.3,
            lr=0.04,
            relation_lr=0.002,
            eval_num_batch_negs=40,
            eval_num_uniform_negs=11,
        )
    )
    settings = worker_settings(config)
    train = BatchSettings(
        batch_size=100,
        num_batch_negs=20,
        num_uniform_negs=7,
        disable_lhs_negs=True,
        disable_rhs_negs=False,
        max_norm=2.5,
    )
    assert settings == WorkerSettings(
        loss_fn="softmax",
        margin=0.3,
        lr=0.04,
        relation_lr=0.002,
        train=train,
        holdout=replace(train, batch_size=120, num_batch_negs=40, num_uniform_negs=11),
        offline=train,
    )
    assert settings.model_lr == 0.002
    assert worker_settings(config.model_copy(update={"relation_lr": None})).model_lr == 0.04
    assert pickle.loads(pickle.dumps(settings)) == settings  # what the workers receive at spawn


def test_the_session_hands_its_workers_settings_not_the_config(make_config: Any) -> None:
    """The payload pickled to each HOGWILD worker holds WorkerSettings; no field of it is the config."""
    config = parse_config(make_config("ckpt", workers=1, loss_fn="softmax", margin=0.25))
    session = build_session(config, open_run_stores(config))
    try:
        payload = session.workers._init[1]  # (init_fn, payload): sent as is to every child
        assert isinstance(payload, WorkerInit)
        assert payload.settings == worker_settings(config)
        assert not any(isinstance(value, ConfigSchema) for value in vars(payload).values())
    finally:
        session.close()


def test_the_memory_plan_is_logged(make_config: Any, graph_2x2: Any, caplog: pytest.LogCaptureFixture) -> None:
    config = parse_config(make_config("ckpt", data=graph_2x2))
    with caplog.at_level("INFO", logger="pbg_core.session.build"):
        session = build_session(config, open_run_stores(config))
    session.close()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory plan: ")]
    assert len(lines) == 1 and lines[0].startswith("memory plan: 2 of 2 partitions resident + 0 in flight x ")


def test_partitions_that_cannot_fit_in_memory_are_refused_before_any_worker(
    make_config: Any, graph: Any, tmp_path: Path
) -> None:
    entities = tmp_path / "entities"
    shutil.copytree(graph.entity_path, entities)
    (entities / "entity_count_node_0.txt").write_text("100000000000\n")  # 10^11 rows x 68 B = 6.8 TB
    config = parse_config(make_config("ckpt", entity_path=str(entities)))
    with pytest.raises(MemoryPlanError) as raised:
        build_session(config, open_run_stores(config))
    message = str(raised.value)
    assert "memory: 1 partition(s) need at least 1 resident + 0 in flight x 6800.00 GB" in message
    assert "use num_partitions >= " in message and "for entity type(s) node" in message


def test_resident_partitions_sizes_the_pool_or_is_refused(make_config: Any, graph_2x2: Any) -> None:
    config = parse_config(make_config("ckpt", data=graph_2x2, resident_partitions=1))
    with pytest.raises(MemoryPlanError, match=r"^resident_partitions: 1 is not allowed here; .* needs 2 partitions"):
        build_session(config, open_run_stores(config))
    config = parse_config(make_config("ckpt", data=graph_2x2, resident_partitions=5))  # capped at the 2 there are
    session = build_session(config, open_run_stores(config))
    try:
        assert session.residency.pool.buffers().embeddings["node"].shape[0] == 2
    finally:
        session.close()


@pytest.mark.parametrize("seed", [3, None], ids=["given", "drawn"])
def test_the_operators_start_from_the_sessions_seed(make_config: Any, seed: int | None) -> None:
    """The seed is resolved before the model is built: operator_init=normal draws from it, given or drawn."""
    relations = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "complex_diagonal"}]
    config = parse_config(make_config("ckpt", relations=relations, operator_init="normal", seed=seed))
    session = build_session(config, open_run_stores(config))
    try:
        started = session.model_state.model.state_dict()
        assert seed is None or session.seed == seed
        expected = build_model(config, 0, session.seed).state_dict()
        assert started.keys() == expected.keys() and all(torch.equal(started[k], expected[k]) for k in started)
        assert 0 < started["rhs_operators.0.real"].abs().max() < 0.01  # N(0, init_scale²), not 1 + 0i
    finally:
        session.close()
