"""Checkpoints written straight in the checkpoint format, without training: large trained-model
stand-ins for the benchmarks of a trained model's answers (bench.similar, bench.predict).

One entity type, its rows from a caller's generator per partition, names ``ent_0000000``...,
the model's parameters from :func:`pbg_core.model.embedder.build_model` (seeded, optionally
overwritten), version 1 committed; cached by a stamp of the parameters that made it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch


def clustered(rng: np.random.Generator, centres: np.ndarray, count: int, spread: float) -> np.ndarray:
    """``count`` rows, each a random centre plus N(0, spread^2) per coordinate, float32."""
    picks = rng.integers(len(centres), size=count)
    noise = rng.standard_normal((count, centres.shape[1]), dtype=np.float32) * np.float32(spread)
    return centres[picks] + noise


def is_cached(base: Path, stamp: dict[str, Any]) -> bool:
    """Whether ``base`` holds a checkpoint written with ``stamp``; if not, ``base`` is emptied for a new one."""
    path = base / "stamp.json"
    if path.exists() and json.loads(path.read_text()) == stamp:
        return True
    shutil.rmtree(base, ignore_errors=True)
    return False


def write_checkpoint(
    base: Path,
    config: Any,
    entity: str,
    count: int,
    rows: Callable[[int, int], np.ndarray],
    stamp: dict[str, Any],
    params: Callable[[dict[str, torch.Tensor]], None] | None = None,
) -> None:
    """Write version 1 of ``config``'s checkpoint: ``count`` entities of ``entity`` and its model.

    Args:
        base: The directory the stamp is written into, last (see :func:`is_cached`).
        config: A parsed config whose only entity type is ``entity``; its ``entity_path`` and
            ``checkpoint_path`` are written.
        entity: The entity type.
        count: Its entities, split evenly over the config's partitions.
        rows: ``rows(part, n)``: partition ``part``'s ``n`` rows, ``float32 [n, dimension]``;
            called for the partitions in order.
        stamp: What made the checkpoint (written to ``base/stamp.json`` once it is complete).
        params: Called with the model's state dict (seeded by torch's default generator) to
            change parameters in place before they are saved; None: as built.
    """
    from pbg_core.config.validation import config_to_json
    from pbg_core.model.embedder import build_model
    from pbg_core.model.param_names import model_public_names
    from pbg_core.ports import CheckpointMetadata
    from pbg_core.session.parts import config_json_text
    from storage.checkpoints import CheckpointStore
    from storage.entities import EntityStore

    entities, store = EntityStore(config.entity_path), CheckpointStore(config.checkpoint_path)
    config_dict = config_to_json(config)
    store.save_config(config_dict)  # the directory answers alone: `pbg predict CHECKPOINT_DIR`
    meta = CheckpointMetadata(config_json=config_json_text(config_dict))
    parts = config.entities[entity].num_partitions
    bounds = np.linspace(0, count, parts + 1).astype(int)
    for part, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        size = int(stop - start)
        entities.save_count(entity, part, size)
        entities.save_names(entity, part, [f"ent_{i:07d}" for i in range(start, stop)])
        store.save_embeddings(entity, part, 1, torch.from_numpy(rows(part, size)), None, meta)
    state = build_model(config, 0).state_dict()
    if params is not None:
        params(state)
    store.save_model(1, state, model_public_names(state), None, meta)
    store.write_version(1)
    (base / "stamp.json").write_text(json.dumps(stamp))


__all__ = ["clustered", "is_cached", "write_checkpoint"]
