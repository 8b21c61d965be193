"""tasks.evaluate: ``pbg eval``'s two tasks, on a trained planted-structure checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from disk_state import changes, tree_state
from test_by_name import EDGES, committed, imported
from test_by_name import config_for as by_name_config

from pbg_core.config import parse_config
from pbg_core.errors import ConfigError
from pbg_core.evaluation.candidates import sample_candidates
from pbg_core.evaluation.sampling import sample_edge_positions
from pbg_core.seeding import derive_seed
from pbg_core.session.build import build_topology
from storage.checkpoint_names import NamesChangedError
from storage.checkpoints import CheckpointStore
from storage.edges import EdgeStore
from storage.errors import DataNotFound
from tasks.checkpoint import switch_version, write_checkpoint
from tasks.evaluate import count_edges, evaluate_edge_path, open_eval_session
from tasks.plan import plan_training
from tasks.runs import opened_run
from tasks.sessions import close_training_session, open_training_session


def test_filtered_evaluation_needs_all_negatives_and_names_the_field(make_config: Any) -> None:
    wanted = r"relations\.0\.all_negs: false.*set -p relations\.0\.all_negs=true"
    with opened_run(parse_config(make_config())) as run, pytest.raises(ConfigError, match=wanted):
        open_eval_session.fn(run, filtered=True)


def test_a_checkpoint_never_committed_is_refused(make_config: Any) -> None:
    config = parse_config(make_config())
    with opened_run(config) as run, pytest.raises(DataNotFound, match="no committed checkpoint to evaluate"):
        open_eval_session.fn(run)


def test_a_checkpoint_whose_names_moved_is_refused_before_any_partition_is_read(tmp_path: Path) -> None:
    """After a plain re-import the edges' (partition, offset) ids are other entities' rows of the checkpoint."""
    imported(tmp_path, EDGES, seed=0)
    config = by_name_config(tmp_path)
    committed(config)
    imported(tmp_path, EDGES[5:] + [("u99", "bought", "i99")], seed=0)
    before = tree_state(tmp_path)
    with opened_run(config) as run, pytest.raises(NamesChangedError, match=r"pbg eval would rank each moved row"):
        open_eval_session.fn(run, candidates=2)  # sampled evaluation goes through the same gate
    assert changes(before, tree_state(tmp_path)) == []


def evaluated_mrr(run: str, edge_path: str) -> float:
    """Mean MRR of the run's committed checkpoint on ``edge_path``, through the two tasks."""
    evaluation = open_eval_session.fn(run)
    try:
        result = evaluate_edge_path.fn(evaluation, edge_path, None)
    finally:
        close_training_session.fn(evaluation)
    assert result["count"] > 0 and set(result["sums"]) >= {"mrr", "r10", "auc"}
    return float(result["sums"]["mrr"] / result["count"])


def train_and_commit(run: Any, train_buckets: Any) -> None:
    """Train every remaining iteration of ``run`` through the tasks, committing each."""
    handle = open_training_session.fn(run)
    try:
        for iteration in plan_training.fn(run).remaining:
            train_buckets(handle, iteration)
            write_checkpoint.fn(handle, iteration)
            switch_version.fn(handle, iteration)
    finally:
        close_training_session.fn(handle)


def trained_then_evaluated(config: Any, train_buckets: Any) -> float:
    """Train ``config``'s iterations through the tasks, commit each, then evaluate the last version."""
    with opened_run(config) as run:
        train_and_commit(run, train_buckets)
        return evaluated_mrr(run, config.edge_paths[0])


def test_evaluation_ranks_with_the_committed_embeddings(make_config: Any, train_buckets: Any) -> None:
    """The same graph and seed, learning rate 0 (the initial embeddings) against the default."""
    untrained = trained_then_evaluated(parse_config(make_config("frozen", lr=0.0)), train_buckets)
    trained = trained_then_evaluated(parse_config(make_config("trained")), train_buckets)
    assert trained > 1.5 * untrained  # measured: 0.086 (about chance) and 0.161


# ---- sampled evaluation: the ranks against sampled candidates, counted by hand ------------------
SAMPLE_SEED, SAMPLED_EDGES, CANDIDATES = 5, 150, 30


@pytest.fixture(scope="module")
def trained_2x2(
    graph_2x2: Any, config_for: Any, train_buckets: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The 2-partition planted graph trained one epoch (dot products of raw embeddings: no global embedding)."""
    checkpoint = tmp_path_factory.mktemp("sampled") / "ckpt"
    raw = config_for(graph_2x2, checkpoint, num_epochs=1, global_emb=False, batch_size=1000)
    with opened_run(parse_config(raw)) as run:
        train_and_commit(run, train_buckets)
    return raw


def sampled_sums(config: Any, edge_path: str, filter_paths: list[str] | None) -> tuple[dict[str, float], Any]:
    """The tasks' metric sums of a sampled evaluation of ``edge_path``, and the sampled positions."""
    with opened_run(config) as run:
        handle = open_eval_session.fn(run, filtered=filter_paths is not None, candidates=CANDIDATES, seed=SAMPLE_SEED)
        try:
            (counts,) = count_edges.fn(handle, [edge_path])
            positions = sample_edge_positions(counts, SAMPLED_EDGES, SAMPLE_SEED)
            result = evaluate_edge_path.fn(handle, edge_path, filter_paths, [p.tolist() for p in positions])
        finally:
            close_training_session.fn(handle)
    assert result["count"] == SAMPLED_EDGES
    return result["sums"], positions


def brute_force_sums(config: Any, edge_path: str, filtered: bool, positions: Any) -> dict[str, float]:
    """Rank sums counted edge by edge against the candidates the worker draws (workers=1: one generator per
    bucket, one batch per bucket, lhs candidates then rhs ones), by dot products of the stored embeddings."""
    checkpoint, edges_of = CheckpointStore(config.checkpoint_path), EdgeStore(edge_path)
    version = checkpoint.read_version()
    tables = {part: checkpoint.load_embeddings("node", part, version)[0] for part in range(2)}
    sums = dict.fromkeys(("pos_rank", "mrr", "r1", "r10"), 0.0)
    for bucket, rows in zip(build_topology(config).buckets(), positions, strict=True):
        if not len(rows):
            continue
        edges = edges_of.load(bucket)[rows]
        known = {(int(l), int(r)) for p in config.edge_paths for l, r in _pairs(p, bucket)} if filtered else set()
        generator = torch.Generator().manual_seed(derive_seed(SAMPLE_SEED, "offline", *bucket, 0))
        chunk = min(CANDIDATES, len(edges))
        num_chunks = -(-len(edges) // chunk)
        lhs_cands = sample_candidates(num_chunks, CANDIDATES, len(tables[bucket.lhs]), generator)
        rhs_cands = sample_candidates(num_chunks, CANDIDATES, len(tables[bucket.rhs]), generator)
        left, right = tables[bucket.lhs], tables[bucket.rhs]
        for i, (lhs, rhs) in enumerate(zip(edges.lhs.tensor.tolist(), edges.rhs.tensor.tolist(), strict=True)):
            pos = float(left[lhs] @ right[rhs])
            lhs_negs = [
                float(left[x] @ right[rhs])
                for x in lhs_cands[i // chunk].tolist()
                if x != lhs and (x, rhs) not in known
            ]
            rhs_negs = [
                float(left[lhs] @ right[x])
                for x in rhs_cands[i // chunk].tolist()
                if x != rhs and (lhs, x) not in known
            ]
            for negs in (lhs_negs, rhs_negs):
                rank = 1 + sum(neg >= pos for neg in negs)
                for name, value in (("pos_rank", rank), ("mrr", 1 / rank), ("r1", rank <= 1), ("r10", rank <= 10)):
                    sums[name] += float(value) / 2
    return sums


def _pairs(edge_path: str, bucket: Any) -> list[tuple[int, int]]:
    edges = EdgeStore(edge_path).load(bucket)
    return list(zip(edges.lhs.tensor.tolist(), edges.rhs.tensor.tolist(), strict=True))


@pytest.mark.parametrize("filtered", [False, True], ids=["raw", "filtered"])
def test_sampled_ranks_are_the_counts_against_the_same_candidates(
    trained_2x2: dict[str, Any], graph_2x2: Any, filtered: bool
) -> None:
    filters = [graph_2x2.train_path, graph_2x2.test_path] if filtered else None
    config = parse_config({**trained_2x2, "edge_paths": [graph_2x2.train_path, graph_2x2.test_path]})
    sums, positions = sampled_sums(config, graph_2x2.test_path, filters)
    assert sum(map(len, positions)) == SAMPLED_EDGES and sum(1 for rows in positions if len(rows)) == 4
    expected = brute_force_sums(config, graph_2x2.test_path, filtered, positions)
    for name, value in expected.items():
        assert sums[name] == pytest.approx(value, rel=1e-9, abs=1e-9), name
