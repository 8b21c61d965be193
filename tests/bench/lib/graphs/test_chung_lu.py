"""bench.lib.graphs.chung_lu: exact counts, no self-loops or duplicates, seeded, split and cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.lib.graphs import chung_lu

SMALL = chung_lu.GraphParams(nodes=300, edges=6000, seed=3, alpha=0.5, test_fraction=0.01)


def read_edges(path: Path) -> np.ndarray:
    return np.loadtxt(path, dtype=np.int64, delimiter="\t", ndmin=2)


def test_edges_are_distinct_loop_free_and_exactly_counted() -> None:
    keys, counts = chung_lu.edge_keys(SMALL)
    lhs, rhs = keys // SMALL.nodes, keys % SMALL.nodes
    assert len(keys) == SMALL.edges
    assert len(np.unique(keys)) == SMALL.edges
    assert not np.any(lhs == rhs)
    # 6000 edges among 300 heavy-tailed nodes collide often: the redraw path ran.
    assert counts["duplicates_redrawn"] > 0


def test_same_seed_same_graph_other_seed_other_graph() -> None:
    first, _ = chung_lu.edge_keys(SMALL)
    again, _ = chung_lu.edge_keys(SMALL)
    other, _ = chung_lu.edge_keys(chung_lu.GraphParams(300, 6000, 4, 0.5, 0.01))
    assert np.array_equal(first, again)
    assert not np.array_equal(first, other)


def test_degrees_are_heavy_tailed() -> None:
    params = chung_lu.GraphParams(nodes=20_000, edges=200_000, seed=0, alpha=0.5, test_fraction=0.01)
    keys, _ = chung_lu.edge_keys(params)
    out_degree = np.bincount(keys // params.nodes, minlength=params.nodes)
    # Chung-Lu with weights (rank+1)^-0.5: the top node expects about E / (2 sqrt N) = 707 edges.
    assert out_degree.max() > 20 * np.median(out_degree)


def test_files_split_and_cache(tmp_path: Path) -> None:
    meta = chung_lu.ensure_graph(SMALL, tmp_path)
    train, test = read_edges(tmp_path / "train.tsv"), read_edges(tmp_path / "test.tsv")
    assert (len(train), len(test)) == (5940, 60) == (meta["summary"]["train_edges"], meta["summary"]["test_edges"])
    together = {tuple(e) for e in np.concatenate([train, test]).tolist()}
    assert len(together) == SMALL.edges  # the splits do not overlap
    assert meta["cached"] is False
    assert chung_lu.ensure_graph(SMALL, tmp_path)["cached"] is True
    changed = chung_lu.GraphParams(300, 6000, 3, 0.5, 0.02)
    assert chung_lu.ensure_graph(changed, tmp_path)["cached"] is False
    assert json.loads((tmp_path / "graph.json").read_text())["params"]["test_fraction"] == 0.02
    assert len(read_edges(tmp_path / "test.tsv")) == 120


def test_more_than_half_the_possible_edges_is_refused() -> None:
    with pytest.raises(ValueError, match="46 edges: at most half of the 90 directed edges of 10 nodes"):
        chung_lu.edge_keys(chung_lu.GraphParams(10, 46, 0, 0.5, 0.01))


def test_scale_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="--scale must be in"):
        chung_lu.scaled(1.5, 0)


def test_planted_communities_hold_all_but_the_mixed_share() -> None:
    params = chung_lu.GraphParams(20_000, 200_000, 0, 0.5, 0.01, communities=20, mix=0.3)
    keys, _ = chung_lu.edge_keys(params)
    lhs, rhs = keys // params.nodes, keys % params.nodes
    inside = np.mean(lhs % 20 == rhs % 20)
    # 70% drawn inside, plus 1/20 of the 30% drawn anywhere; duplicates redrawn shift it a little.
    assert 0.70 < inside < 0.76
    assert len(np.unique(keys)) == params.edges and not np.any(lhs == rhs)
    in_degree = np.bincount(rhs, minlength=params.nodes)
    assert in_degree.max() > 20 * np.median(in_degree)  # still heavy-tailed inside communities
    summary = chung_lu.summarize(keys, params.nodes, 2000, params.communities)
    assert summary["within_community_edges"] == int(np.count_nonzero(lhs % 20 == rhs % 20))


def test_community_size_sets_the_count_and_the_tag() -> None:
    params = chung_lu.scaled(0.01, 0, community_size=1000, mix=0.3)
    assert params.communities == params.nodes // 1000
    assert params.tag().endswith(f"-c{params.communities}-m0.3")
    assert "-c" not in chung_lu.scaled(0.01, 0).tag()
    with pytest.raises(ValueError, match="--mix must be in"):
        chung_lu.scaled(0.01, 0, community_size=1000, mix=1.5)


def test_merging_redrawn_keys_equals_a_unique_of_both() -> None:
    rng = np.random.default_rng(5)
    keys = np.unique(rng.integers(0, 1000, 400))
    extra = rng.integers(0, 1000, 300)  # overlaps keys and itself
    assert np.array_equal(chung_lu._merge_new(keys, extra), np.unique(np.concatenate([keys, extra])))
    assert np.array_equal(chung_lu._merge_new(keys, np.array([], dtype=np.int64)), keys)
    assert np.array_equal(chung_lu._merge_new(keys, np.array([10**6])), np.append(keys, 10**6))
