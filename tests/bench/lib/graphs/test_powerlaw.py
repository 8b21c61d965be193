"""bench.lib.graphs.powerlaw and .kg: seeded, cached by their parameters, the shapes they promise."""

from __future__ import annotations

import json
from pathlib import Path

from bench.lib.graphs import kg
from bench.lib.graphs.kg import KGShape, ensure_kg, generate_kg
from bench.lib.graphs.powerlaw import ensure_graph, generate_edges

SHAPE = KGShape(entities=500, relations=4, train_edges=3000, test_edges=30, seed=1)


def test_same_seed_same_edges_other_seed_other_edges() -> None:
    first, again, other = (generate_edges(1000, 5000, 3, seed) for seed in (0, 0, 1))
    assert all((a == b).all() for a, b in zip(first, again, strict=True))
    assert not (first[0] == other[0]).all()
    assert first[1].max() < 3 and first[0].max() < 1000


def test_the_powerlaw_tsv_is_cached_by_its_parameters(tmp_path: Path) -> None:
    path = tmp_path / "g.tsv"
    summary = ensure_graph(path, 1000, 5000, 2, seed=0)
    lines = path.read_text().splitlines()
    assert len(lines) == summary["edges"] == 5000
    assert all(line.startswith("n") and line.split("\t")[1] in {"r0", "r1"} for line in lines)
    stamp = path.stat().st_mtime_ns
    assert ensure_graph(path, 1000, 5000, 2, seed=0) == summary and path.stat().st_mtime_ns == stamp
    ensure_graph(path, 1000, 5000, 2, seed=1)
    assert json.loads((tmp_path / "g.tsv.json").read_text())["params"]["seed"] == 1


def test_the_kg_has_no_loops_or_repeats_and_its_test_split_names_train_entities(tmp_path: Path) -> None:
    train, test = generate_kg(SHAPE)
    assert len(train) == 3000 and len(test) == 30
    assert not (train[:, 0] == train[:, 2]).any()
    triples = {tuple(row) for row in train.tolist()}
    assert len(triples) == 3000 and not triples & {tuple(row) for row in test.tolist()}
    assert set(test[:, [0, 2]].ravel()) <= set(train[:, [0, 2]].ravel())
    summary = ensure_kg(tmp_path / "kg.tsv", SHAPE)
    assert summary["train_edges"] == 3000 and kg.test_path(tmp_path / "kg.tsv").exists()
