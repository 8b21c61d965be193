"""bench.lib.graphs.planted_kg: counts, no loops or duplicates, the planted maps hold, seeded, files and cache."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.lib.graphs import planted_kg
from bench.lib.graphs.planted_kg import PlantedShape

SMALL = PlantedShape(
    entities=2_400, clusters=8, groups=6, base_relations=6, compositions=2, inverses=2, domain=3, train_edges=20_000
)


def read_rows(path: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.split("\t")) for line in path.read_text().splitlines()]  # type: ignore[misc]


def test_counts_no_self_loops_no_duplicates_across_splits() -> None:
    splits = planted_kg.generate_planted(SMALL).splits
    assert {name: len(rows) for name, rows in splits.items()} == {"train": 20_000, "valid": 200, "test": 200}
    together = np.concatenate(list(splits.values()))
    assert not np.any(together[:, 0] == together[:, 2])
    assert len(np.unique(together, axis=0)) == len(together)


def test_held_out_splits_name_only_what_train_has() -> None:
    splits = planted_kg.generate_planted(SMALL).splits
    entities, relations = set(splits["train"][:, [0, 2]].ravel()), set(splits["train"][:, 1])
    for name in ("valid", "test"):
        assert set(splits[name][:, [0, 2]].ravel()) <= entities
        assert set(splits[name][:, 1]) <= relations


def test_tails_follow_the_planted_type_and_group_maps_but_for_the_noise() -> None:
    graph = planted_kg.generate_planted(SMALL)
    train = graph.splits["train"]
    head_type, head_group = graph.type_and_group(SMALL, train[:, 0])
    tail_type, tail_group = graph.type_and_group(SMALL, train[:, 2])
    maps = np.stack([r.type_map for r in graph.relations])
    perms = np.stack([r.group_perm for r in graph.relations])
    assert np.all(maps[train[:, 1], head_type] >= 0)  # heads come only from a relation's domain
    planted = (maps[train[:, 1], head_type] == tail_type) & (perms[train[:, 1], head_group] == tail_group)
    # 5% noise tails are uniform (1 in 48 of them lands in the planted group anyway); independent
    # heads and tails (bench.lib.graphs.kg) would agree about 1 time in 48.
    assert 0.93 < planted.mean() < 0.97


def test_compositions_and_inverses_are_made_of_their_base_relations() -> None:
    relations = planted_kg.generate_planted(SMALL).relations
    kinds = [r.kind for r in relations]
    assert kinds == ["base"] * 6 + ["composition"] * 2 + ["inverse"] * 2
    for relation in relations[6:8]:
        first, second = (relations[i] for i in relation.parts)
        defined = np.flatnonzero(relation.type_map >= 0)
        assert len(defined) > 0
        assert np.array_equal(relation.type_map[defined], second.type_map[first.type_map[defined]])
        assert np.array_equal(relation.group_perm, second.group_perm[first.group_perm])
    for relation in relations[8:]:
        base = relations[relation.parts[0]]
        sources = np.flatnonzero(base.type_map >= 0)
        assert np.array_equal(relation.type_map[base.type_map[sources]], sources)
        assert np.array_equal(relation.group_perm[base.group_perm], np.arange(SMALL.groups))


def test_same_seed_same_graph_other_seed_other_graph() -> None:
    first = planted_kg.generate_planted(SMALL).splits["train"]
    assert np.array_equal(first, planted_kg.generate_planted(SMALL).splits["train"])
    assert not np.array_equal(first, planted_kg.generate_planted(replace(SMALL, seed=1)).splits["train"])


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"entities": 2_401}, "entities (2401) must be a multiple of clusters x groups"),
        ({"domain": 9}, "domain (9) must be <= clusters (8)"),
        ({"noise": 1.0}, "noise must be in [0, 1), got 1.0"),
        ({"train_edges": 0}, "train_edges must be > 0, got 0"),
        ({"inverses": 7}, "inverses (7) must be <= base_relations (6)"),
    ],
)
def test_bad_shapes_are_refused_naming_the_parameter(change: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError) as raised:
        planted_kg.generate_planted(replace(SMALL, **change))  # type: ignore[arg-type]
    assert str(raised.value) == named


def test_files_have_data_kg_layout_and_are_cached(tmp_path: Path) -> None:
    summary = planted_kg.ensure_planted(tmp_path, SMALL)
    rows = {split: read_rows(tmp_path / f"{split}.txt") for split in planted_kg.SPLITS}
    assert {split: len(r) for split, r in rows.items()} == {"train": 20_000, "valid": 200, "test": 200}
    assert summary["train_edges"] == 20_000 and summary["relations"] == 10
    head, rel, tail = rows["train"][0]
    assert head.startswith("e") and rel.startswith("rel") and tail.startswith("e")
    stamp = (tmp_path / "train.txt").stat().st_mtime_ns
    assert planted_kg.ensure_planted(tmp_path, SMALL) == summary
    assert (tmp_path / "train.txt").stat().st_mtime_ns == stamp
    planted_kg.ensure_planted(tmp_path, replace(SMALL, seed=2))
    assert read_rows(tmp_path / "train.txt") != rows["train"]


def test_the_oracle_ranks_within_the_planted_group_and_noise_lowers_its_ceiling() -> None:
    noisy = planted_kg.oracle_mrr(SMALL, planted_kg.generate_planted(SMALL))
    clean_shape = replace(SMALL, noise=0.0)
    clean = planted_kg.oracle_mrr(clean_shape, planted_kg.generate_planted(clean_shape))
    # Groups of 50 with Zipf(0.6) popularity: the answer is the group's k-th most popular member
    # (filtered answers skipped), far from certain; a noise answer ranks about 1,200th of 2,400.
    assert 0.1 < noisy < clean < 0.6
