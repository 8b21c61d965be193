"""The ``pbg-eval`` flow on a trained checkpoint of the planted-cluster graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tasks.runs
from flows.evaluate import pbg_eval
from pbg_core.config import parse_config
from pbg_core.errors import ConfigError
from storage.errors import DataNotFound

NUM_NODES = 200
RANDOM_MRR = sum(1 / rank for rank in range(1, NUM_NODES + 1)) / NUM_NODES
METRICS = {"loss", "pos_rank", "mrr", "r1", "r10", "r50", "auc", "count"}


def all_negs_config(config: dict[str, Any], edge_path: str) -> Any:
    """``config`` ranking ``edge_path`` against every node (needed for filtered metrics)."""
    relations = [{**rel, "all_negs": True} for rel in config["relations"]]
    return parse_config({**config, "edge_paths": [edge_path], "relations": relations, "num_uniform_negs": 0})


def snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``directory`` with its mtime and content."""
    return {
        str(p.relative_to(directory)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_an_evaluation_opens_its_stores_once(trained: Any, graph: Any, calls_of: Any) -> None:
    config = all_negs_config(trained.config, graph.test_path)
    opens = calls_of(tasks.runs, "open_run_stores")
    assert pbg_eval(config=config)["count"] > 0
    assert len(opens) == 1 and opens[0][0] is config


@pytest.fixture(scope="module")
def raw_and_filtered(trained: Any, graph: Any) -> tuple[dict[str, float], dict[str, float]]:
    config = all_negs_config(trained.config, graph.test_path)
    before = snapshot(trained.checkpoint)
    raw = pbg_eval(config=config)
    filtered = pbg_eval(config=config, filter_paths=[graph.train_path, graph.test_path])
    assert snapshot(trained.checkpoint) == before, "evaluation must not write to the checkpoint"
    return raw, filtered


def check_metrics(metrics: dict[str, float], count: int) -> None:
    assert set(metrics) == METRICS
    assert metrics["count"] == count
    assert 0 <= metrics["r1"] <= metrics["r10"] <= metrics["r50"] <= 1
    assert 0 < metrics["mrr"] <= 1 and 0 <= metrics["auc"] <= 1
    # Jensen: the mean of 1/rank is at least 1 / (mean rank).
    assert metrics["mrr"] >= 1 / metrics["pos_rank"] - 1e-9


def test_raw_all_negs_eval_ranks_every_test_edge_well_above_chance(
    raw_and_filtered: tuple[dict[str, float], dict[str, float]], graph: Any
) -> None:
    raw, _ = raw_and_filtered
    check_metrics(raw, graph.num_test_edges)
    assert raw["mrr"] > 4 * RANDOM_MRR
    assert raw["pos_rank"] < NUM_NODES / 4  # chance: about NUM_NODES / 2


def test_filtered_eval_is_at_least_raw(raw_and_filtered: tuple[dict[str, float], dict[str, float]], graph: Any) -> None:
    raw, filtered = raw_and_filtered
    check_metrics(filtered, graph.num_test_edges)
    assert filtered["mrr"] >= raw["mrr"]
    assert filtered["pos_rank"] <= raw["pos_rank"]
    assert filtered["r1"] >= raw["r1"] and filtered["r10"] >= raw["r10"]
    # Every test edge's source has 8 known (training) neighbours that raw ranking counts against it.
    assert filtered["mrr"] > raw["mrr"] + 0.05


def test_eval_with_the_configs_own_sampled_negatives(trained: Any, graph: Any) -> None:
    config = parse_config({**trained.config, "edge_paths": [graph.test_path]})
    check_metrics(pbg_eval(config=config), graph.num_test_edges)


def test_eval_before_any_training_fails_clearly(make_config: Any) -> None:
    config = make_config("never_trained")
    with pytest.raises(DataNotFound) as raised:
        pbg_eval(config=parse_config(config))
    assert config["checkpoint_path"] in str(raised.value)
    assert "train first" in str(raised.value)


def test_filtered_eval_without_all_negs_is_refused(trained: Any, graph: Any) -> None:
    config = parse_config({**trained.config, "edge_paths": [graph.test_path]})
    with pytest.raises(ConfigError, match="all_negs"):
        pbg_eval(config=config, filter_paths=[graph.train_path, graph.test_path])


# ---- sampled evaluation ------------------------------------------------------------------------
RANKS = ("pos_rank", "mrr", "r1", "r10", "r50")


def test_every_entity_as_candidates_ranks_as_full_ranking(
    trained: Any, graph: Any, raw_and_filtered: tuple[dict[str, float], dict[str, float]]
) -> None:
    """K = the partition's entity count: the candidates are every entity, so raw and filtered
    ranks are the all_negs path's (the AUC draws its pairs differently)."""
    config = all_negs_config(trained.config, graph.test_path)  # all_negs is on: --candidates turns it off
    raw, filtered = raw_and_filtered
    sampled_raw = pbg_eval(config=config, candidates=NUM_NODES)
    sampled_filtered = pbg_eval(config=config, filter_paths=[graph.train_path, graph.test_path], candidates=NUM_NODES)
    for full, sampled in ((raw, sampled_raw), (filtered, sampled_filtered)):
        assert sampled["count"] == full["count"] == graph.num_test_edges
        assert {name: sampled[name] for name in RANKS} == pytest.approx({name: full[name] for name in RANKS})
    assert sampled_filtered["mrr"] > sampled_raw["mrr"] + 0.05  # the filter reaches the candidates


def test_a_sample_is_seeded_and_says_what_it_ranked(trained: Any, graph: Any) -> None:
    config = parse_config({**trained.config, "edge_paths": [graph.train_path, graph.test_path]})
    first, again, other = (
        pbg_eval(config=config, sample_edges=60, candidates=25, sample_seed=seed) for seed in (3, 3, 4)
    )
    assert first == again and first["mrr"] != other["mrr"]
    assert first["count"] == 60 and first["total_edges"] == graph.num_train_edges + graph.num_test_edges
    assert (first["sample_edges"], first["candidates"], first["sample_seed"]) == (60, 25, 3)
    # Fewer candidates than entities: a higher MRR than full ranking's, never comparable to it.
    assert first["mrr"] > pbg_eval(config=config, sample_edges=60, sample_seed=3)["mrr"]


def test_sampling_options_below_one_are_refused_by_the_flow(trained: Any, graph: Any) -> None:
    config = parse_config({**trained.config, "edge_paths": [graph.test_path]})
    with pytest.raises(ConfigError, match="--sample-edges 0 is not allowed; give a whole number >= 1"):
        pbg_eval(config=config, sample_edges=0)
    with pytest.raises(ConfigError, match=r"--candidates 201 is not allowed: give 1 to 200"):
        pbg_eval(config=config, candidates=201)
