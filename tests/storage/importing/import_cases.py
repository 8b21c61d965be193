"""What the importer tests share: a config on a store root, TSV inputs, reading the import back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import store_io
from store_io import StorePath

from pbg_core.config import ConfigSchema, parse_config
from storage.edges import EdgeStore
from storage.entities import EntityStore


def make_config(
    root: StorePath, entities: dict[str, int], relations: list[tuple[str, str, str]], **extra: Any
) -> ConfigSchema:
    num_paths = extra.pop("num_edge_paths", 1)
    raw = {
        "entities": {name: {"num_partitions": parts} for name, parts in entities.items()},
        "relations": [{"name": n, "lhs": lhs, "rhs": rhs} for n, lhs, rhs in relations],
        "dimension": 4,
        "entity_path": str(root / "entities"),
        "edge_paths": [str(root / f"edges{i}") for i in range(num_paths)],
        "checkpoint_path": str(root / "ckpt"),
        **extra,
    }
    return parse_config(raw)


def write_tsv(path: StorePath, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def read_back(config: ConfigSchema, edge_path_idx: int = 0) -> list[tuple[str, str, str, float | None]]:
    """Every stored edge of one edge path mapped back to (lhs name, rel name, rhs name, weight)."""
    entity_store = EntityStore(config.entity_path)
    rel_names = entity_store.load_dynamic_relation_names()
    edge_store = EdgeStore(config.edge_paths[edge_path_idx])
    nparts = {name: e.num_partitions for name, e in config.entities.items()}
    names: dict[tuple[str, int], list[str]] = {}

    def name_of(entity: str, part: int, offset: int) -> str:
        if (entity, part) not in names:
            names[entity, part] = entity_store.load_names(entity, part)
        return names[entity, part][offset]

    out = []
    for bucket in edge_store.list_buckets():
        edges = edge_store.load(bucket)
        for i in range(len(edges)):
            rel = int(edges.rel[i])
            relation = config.relations[0 if config.dynamic_relations else rel]
            lhs_part = bucket.lhs if nparts[relation.lhs] > 1 else 0
            rhs_part = bucket.rhs if nparts[relation.rhs] > 1 else 0
            lhs = name_of(relation.lhs, lhs_part, int(edges.lhs.tensor[i]))
            rhs = name_of(relation.rhs, rhs_part, int(edges.rhs.tensor[i]))
            weight = None if edges.weight is None else float(edges.weight[i])
            out.append((lhs, rel_names[rel], rhs, weight))
    return out


def all_files(root: StorePath) -> list[str]:
    """Files and directories below ``root``, relative (S3 has no directories: they are implied by keys)."""
    files = store_io.all_files(str(root))
    dirs = {f.rsplit("/", i)[0] for f in files for i in range(1, f.count("/") + 1)}
    if not root.is_s3:
        dirs |= {str(p.relative_to(str(root))) for p in Path(str(root)).rglob("*") if p.is_dir()}
    return sorted(set(files) | dirs)
