"""Small models for the storage.trained tests: a real import, and committed versions written with seeded rows.

The graph: entity types ``drug`` and ``disease``, two partitions each, imported with the real
importer (``pbg import``'s code), so names files, names records and edge paths are what a user
has. A version is written as a run commits one (rows, model file with its config and names
record, ``checkpoint_version.txt``), with seeded random rows and parameters instead of trained
ones: what the tests check (names, shapes, versions, ranks against a brute force) does not
depend on training. tests/storage/trained/test_ranks_match_eval.py trains for real.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch
from store_io import StorePath

from pbg_core.config import ConfigSchema, config_to_json, parse_config
from pbg_core.model.embedder import build_model
from pbg_core.ports import CheckpointMetadata, NamesDigests
from pbg_core.session.build import build_topology
from pbg_core.session.parts import ModelState, config_json_text
from storage.checkpoint_names import NamesArchive, current_digests, names_url
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions

DRUGS = ["aspirin", "asparagine", "ibuprofen", "insulin", "metformin", "Penicillin"] + [f"drug{i}" for i in range(24)]
DISEASES = ["diabetes", "asthma", "migraine", "influenza"] + [f"disease{i}" for i in range(22)]
RELATIONS = [
    {"name": "treats", "lhs": "drug", "rhs": "disease", "operator": "linear"},
    {"name": "interacts", "lhs": "drug", "rhs": "drug", "operator": "translation"},
    {"name": "treated_by", "lhs": "disease", "rhs": "drug"},
]


def graph_edges(seed: int = 0, count: int = 240) -> list[tuple[str, str, str]]:
    """Seeded edges of every relation, each entity on at least one edge."""
    rng = random.Random(seed)
    edges = [(drug, "treats", DISEASES[i % len(DISEASES)]) for i, drug in enumerate(DRUGS)]
    edges += [(DRUGS[i % len(DRUGS)], "treats", disease) for i, disease in enumerate(DISEASES)]
    for _ in range(count):
        relation = rng.choice(RELATIONS)
        lhs = rng.choice(DRUGS if relation["lhs"] == "drug" else DISEASES)
        rhs = rng.choice(DRUGS if relation["rhs"] == "drug" else DISEASES)
        edges.append((lhs, relation["name"], rhs))
    return edges


def raw_config(root: StorePath | Path, **overrides: Any) -> dict[str, Any]:
    """The config dict of the graph under ``root`` (entity files, one edge path, a checkpoint)."""
    raw: dict[str, Any] = {
        "entities": {"drug": {"num_partitions": 2}, "disease": {"num_partitions": 2}},
        "relations": RELATIONS,
        "dimension": 6,
        "comparator": "dot",
        "entity_path": str(root / "entities"),
        "edge_paths": [str(root / "edges")],
        "checkpoint_path": str(root / "ckpt"),
        "seed": 0,
    }
    raw.update(overrides)
    return raw


def imported(config: ConfigSchema, tsv: Path, edges: list[tuple[str, str, str]], seed: int = 0) -> None:
    """Import ``edges`` (written to ``tsv``) into ``config``'s entity_path and first edge path."""
    tsv.write_text("".join(f"{lhs}\t{rel}\t{rhs}\n" for lhs, rel, rhs in edges))
    import_edges(config, [str(tsv)], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=seed)


def committed(config: ConfigSchema, version: int = 1, seed: int = 1, record: bool = True, commit: bool = True) -> None:
    """Write version ``version`` of ``config``'s checkpoint: seeded rows and parameters, as a run commits it.

    ``record=False`` writes it as PBG does (no names record, no config attribute beyond the
    directory's config.json). ``commit=False`` leaves checkpoint_version.txt as it was.
    """
    options = config.storage_options_for_fs()
    entities = EntityStore(config.entity_path, options)
    topology = build_topology(config)
    keys = [*topology.partitioned_keys(), *topology.unpartitioned_keys()]
    digests = current_digests(entities, keys, config.dynamic_relations)
    store = CheckpointStore(config.checkpoint_path, options)
    if record:
        NamesArchive(store.url, options).keep({d: names_url(entities, *key) for key, d in digests.entities.items()})
    config_json = config_json_text(config_to_json(config)) if record else ""
    metadata = CheckpointMetadata(config_json, names=digests if record else NamesDigests())
    generator = torch.Generator().manual_seed(seed)
    for entity, part in keys:
        rows = torch.randn(entities.load_count(entity, part), config.entity_dimension(entity), generator=generator)
        store.save_embeddings(entity, part, version, rows, None, metadata)
    count = len(entities.load_dynamic_relation_names()) if config.dynamic_relations else 0
    model = build_model(config, count)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.5 + param)
    ModelState(model, None).save(store, version, metadata)
    store.save_config(config_to_json(config))
    if commit:
        store.write_version(version)


def model_config(root: StorePath | Path, **overrides: Any) -> ConfigSchema:
    """:func:`raw_config` parsed."""
    return parse_config(raw_config(root, **overrides))


__all__ = ["DISEASES", "DRUGS", "committed", "graph_edges", "imported", "model_config", "raw_config"]
