"""Opening a session refuses, before any training, checkpoints that do not fit the config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pbg_core.config import parse_config
from pbg_core.errors import ShapeError
from pbg_core.ports import CheckpointMetadata
from pbg_core.session.build import build_session
from storage.checkpoints import CheckpointStore
from storage.run_stores import open_run_stores

META = CheckpointMetadata(config_json="{}")


def committed(path: Path, shape: tuple[int, int], version: int = 1) -> None:
    store = CheckpointStore(str(path))
    store.save_embeddings("node", 0, version, torch.zeros(shape), None, META)
    store.write_version(version)


@pytest.mark.parametrize("shape", [(200, 8), (150, 16)])
def test_a_committed_checkpoint_of_another_shape_is_refused(make_config: Any, tmp_path: Path,
                                                           shape: tuple[int, int]) -> None:
    config = parse_config(make_config("ckpt"))
    committed(Path(config.checkpoint_path), shape)
    with pytest.raises(ShapeError) as raised:
        build_session(config, open_run_stores(config))
    message = str(raised.value)
    assert config.checkpoint_path in message and "version 1" in message
    assert f"stored shape {shape}" in message and "expects (200, 16)" in message


def test_a_committed_checkpoint_missing_a_partition_is_refused(make_config: Any, graph_2x2: Any) -> None:
    config = parse_config(make_config("ckpt", data=graph_2x2))
    store = CheckpointStore(config.checkpoint_path)
    count = len(json.loads((Path(graph_2x2.entity_path) / "entity_names_node_0.json").read_text()))
    store.save_embeddings("node", 0, 1, torch.zeros(count, 16), None, META)
    store.write_version(1)
    with pytest.raises(ShapeError, match="partition 1: no embeddings file"):
        build_session(config, open_run_stores(config))


def test_an_init_path_of_another_dimension_is_refused(make_config: Any, tmp_path: Path) -> None:
    committed(tmp_path / "init", (200, 4))
    config = parse_config(make_config("ckpt", init_path=str(tmp_path / "init")))
    with pytest.raises(ShapeError, match=r"init.* version 1 does not fit.*stored shape \(200, 4\)"):
        build_session(config, open_run_stores(config))


@pytest.mark.parametrize(("edges", "workers", "expected"), [
    (1_592, 2, 1),       # Nations: two batches of 1000 -> one worker
    (15_999, 2, 1),      # just under 8 batches per worker for two
    (16_000, 2, 2),
    (2_000_000, 2, 2),
    (2_000_000, 64, 64),
    (0, 4, 1),
])
def test_small_buckets_train_on_fewer_workers(edges: int, workers: int, expected: int) -> None:
    from pbg_core.parallel.worker_boot import active_workers

    assert active_workers(edges, 1000, workers) == expected
