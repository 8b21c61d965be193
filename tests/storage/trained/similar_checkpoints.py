"""Real checkpoint versions of one entity type ``e`` for the similarity tests, and a numpy brute force.

A version is written with the stores (``CheckpointStore``, ``EntityStore``): every partition's
rows, the model file with the global embedding, the version pointer. It is opened as a trained
model's answers open it: a :class:`CheckpointReader` and the model restored from the version's file.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from store_io import StorePath

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.model.embedder import MultiRelationEmbedder, build_model
from pbg_core.model.max_norm import renorm_table_
from pbg_core.model.param_names import model_public_names
from pbg_core.ports import CheckpointMetadata
from pbg_core.session.parts import ModelState
from storage.checkpoint_reader import CheckpointReader
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore

META = CheckpointMetadata(config_json="{}")


def make_config(root: StorePath | str, parts: int, dim: int, **extra: Any) -> ConfigSchema:
    """Type ``e`` in ``parts`` partitions, one relation ``e -> e``; ``extra``: comparator, bias, ..."""
    raw = {
        "entities": {"e": {"num_partitions": parts}},
        "relations": [{"name": "near", "lhs": "e", "rhs": "e"}],
        "dimension": dim,
        "entity_path": f"{root}/entities",
        "edge_paths": [],
        "checkpoint_path": f"{root}/ckpt",
        **extra,
    }
    return parse_config(raw)


def write_version(config: ConfigSchema, version: int, tables: list[torch.Tensor], seed: int = 0) -> None:
    """Version ``version`` with ``tables`` as the partitions' rows and a seeded global embedding."""
    entities, store = EntityStore(config.entity_path), CheckpointStore(config.checkpoint_path)
    for part, table in enumerate(tables):
        entities.save_names("e", part, [f"e{part}_{i}" for i in range(table.shape[0])])
        store.save_embeddings("e", part, version, table, None, META)
    model = build_model(config, 0)
    if model.global_embs is not None:
        with torch.no_grad():
            model.global_embs["emb_e"].copy_(
                torch.randn(config.dimension, generator=torch.Generator().manual_seed(seed))
            )
    state = model.state_dict()
    store.save_model(version, state, model_public_names(state), None, META)
    store.write_version(version)


def open_version(config: ConfigSchema, version: int | None = None) -> tuple[MultiRelationEmbedder, CheckpointReader]:
    """The model and the reader of ``version`` (None: the latest), as the API opens them."""
    reader = CheckpointReader(config, version, ["e"], "to search")
    state = ModelState(build_model(config, 0), None)
    state.restore(reader.checkpoints, reader.version, None)
    return state.model, reader


def clustered_tables(sizes: list[int], dim: int, clusters: int, seed: int) -> list[torch.Tensor]:
    """Seeded rows around ``clusters`` centres, split into partitions of ``sizes`` rows."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(clusters, dim, generator=gen)
    rows = centres[torch.randint(clusters, (sum(sizes),), generator=gen)] + 0.3 * torch.randn(
        sum(sizes), dim, generator=gen
    )
    return list(rows.split(sizes))


def brute_force(
    model: MultiRelationEmbedder,
    config: ConfigSchema,
    tables: list[torch.Tensor],
    queries: list[tuple[int, int]],
    k: int,
) -> list[list[tuple[float, int, int]]]:
    """Per query (partition, offset), its ``k`` nearest as (score, partition, offset) in float64 numpy:
    score descending, then (partition, offset) ascending, itself left out."""
    rows = torch.cat(tables).clone()
    if config.max_norm is not None:
        renorm_table_(rows, config.max_norm, settle=True)  # the lookup evaluation does
    x = rows.double().numpy()
    if model.global_embs is not None:
        x = x + model.global_embs["emb_e"].detach().double().numpy()
    bias = x[:, 0] if config.bias else np.zeros(len(x))
    if config.bias:
        x = x[:, 1:]
    if config.comparator == "cos":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    where = [(p, o) for p, table in enumerate(tables) for o in range(table.shape[0])]
    found = []
    for part, offset in queries:
        q = where.index((part, offset))
        squared = ((x - x[q]) ** 2).sum(axis=1)
        base = {"dot": x @ x[q], "cos": x @ x[q], "l2": -np.sqrt(squared), "squared_l2": -squared}[config.comparator]
        scores = base + bias + bias[q]
        ranked = sorted((-scores[i], *where[i]) for i in range(len(x)) if i != q)[:k]
        found.append([(-s, p, o) for s, p, o in ranked])
    return found
