"""storage.trained.known_edges: the known edges of every query, bucket by bucket, under a reader file of entity_path."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from disk_state import changes, tree_state
from small_models import committed, graph_edges, imported, raw_config

from pbg_core.config import parse_config
from pbg_core.types import Side
from storage import layout
from storage.checkpoint_names import NamesChangedError
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.entity_lease import importing
from storage.errors import DataNotFound
from storage.lease import LeaseHeldError
from storage.trained.known_edges import KnownEdges, known_edges

RANKED = {"drug": 2, "disease": 2}


def located(config: Any) -> dict[tuple[str, str], tuple[int, int]]:
    """(entity type, name) -> (partition, offset), from the entity files."""
    store = EntityStore(config.entity_path)
    return {
        (entity, name): (part, offset)
        for entity, schema in config.entities.items()
        for part in range(schema.num_partitions)
        for offset, name in enumerate(store.load_names(entity, part))
    }


@pytest.mark.parametrize("disease_parts", [2, 1], ids=["both partitioned", "one type unpartitioned"])
def test_each_query_finds_exactly_its_known_edges_in_its_buckets(tmp_path: Path, disease_parts: int) -> None:
    """Ranking side S in partition p for an anchor of partition q reads bucket (q, p) or (p, q); an entity type
    with one partition on a side with two has its edges in partition 0 of that side (as pbg import puts them)."""
    raw = raw_config(tmp_path, entities={"drug": {"num_partitions": 2}, "disease": {"num_partitions": disease_parts}})
    config = parse_config(raw)
    edges = graph_edges()
    imported(config, tmp_path / "edges.tsv", edges)
    where = located(config)
    relations = {relation.name: (i, relation.lhs, relation.rhs) for i, relation in enumerate(config.relations)}
    expected: dict[tuple[Side, str, str], set[str]] = defaultdict(set)
    for head, relation, tail in edges:
        expected[(Side.RHS, head, relation)].add(tail)
        expected[(Side.LHS, tail, relation)].add(head)
    known = KnownEdges([EdgeStore(config.edge_paths[0])])
    for (side, anchor, relation), truth in expected.items():
        rel, lhs, rhs = relations[relation]
        anchor_type, target = (lhs, rhs) if side is Side.RHS else (rhs, lhs)
        anchor_part, anchor_offset = where[(anchor_type, anchor)]
        found = set()
        for part in range(config.entities[target].num_partitions):
            index = known.index(side, anchor_part, part)
            assert index is not None
            _, cols = index.known(side, torch.tensor([anchor_offset]), torch.tensor([rel]))
            names = EntityStore(config.entity_path).load_names(target, part)
            found |= {names[col] for col in cols.tolist()}
        assert found == truth, (side, anchor, relation)


def test_indexes_are_kept_until_released(tmp_path: Path) -> None:
    config = parse_config(raw_config(tmp_path))
    imported(config, tmp_path / "edges.tsv", graph_edges())
    known = KnownEdges([EdgeStore(config.edge_paths[0]), EdgeStore(config.edge_paths[0])])
    first = known.index(Side.RHS, 0, 1)
    assert known.index(Side.RHS, 0, 1) is first and known.index(Side.LHS, 1, 0) is first  # one bucket, (0, 1)
    known.release()
    again = known.index(Side.RHS, 0, 1)
    assert again is not first and again is not None and len(again) == len(first)  # duplicates counted once


def test_a_reader_file_is_held_while_the_edges_are_read_and_removed_after(tmp_path: Path) -> None:
    config = parse_config(raw_config(tmp_path))
    imported(config, tmp_path / "edges.tsv", graph_edges())
    committed(config)
    readers = Path(config.entity_path) / layout.READERS_DIR
    before = tree_state(tmp_path)
    with known_edges(config, 1, config.edge_paths, RANKED) as known:
        assert len(list(readers.iterdir())) == 1
        assert known.index(Side.RHS, 1, 1) is not None
    assert changes(before, tree_state(tmp_path)) == []


def opened(config: Any, paths: list[str]) -> None:
    """Enter and leave :func:`known_edges` of ``paths``."""
    with known_edges(config, 1, paths, RANKED):
        pass


def test_refusals_change_nothing(tmp_path: Path) -> None:
    config = parse_config(raw_config(tmp_path))
    imported(config, tmp_path / "edges.tsv", graph_edges())
    committed(config)
    (tmp_path / "empty").mkdir()
    before = tree_state(tmp_path)
    with pytest.raises(DataNotFound, match=r"empty: filter path holds no edge files \(edges_0_0.h5, ...\)"):
        opened(config, [str(tmp_path / "empty")])
    with importing(config.entity_path, "an import"), pytest.raises(LeaseHeldError, match="an import"):
        opened(config, config.edge_paths)
    assert changes(before, tree_state(tmp_path)) == []
    imported(config, tmp_path / "edges.tsv", graph_edges(), seed=3)  # the names move
    before = tree_state(tmp_path)
    with pytest.raises(NamesChangedError, match=r"entity type 'd.*a filtered prediction would rank each moved row"):
        opened(config, config.edge_paths)
    assert changes(before, tree_state(tmp_path)) == []
