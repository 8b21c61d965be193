"""The issue's check: a known true entity's rank in predict's ranking is the rank ``pbg eval`` gives that edge.

A seeded graph of two entity types (drug, disease), two partitions each, relations both ways
(dynamic mode: three relation types from drug to disease), imported with the real importer and
trained through the task bodies (``pbg train``'s session), ``all_negs``. Then, edge by edge of
the test edge path, unfiltered and ``--filtered`` (filter paths: train and test):

- eval's rank of each side comes from ``pbg eval``'s own task (``evaluate-edge-path``) on a
  one-edge edge path, in a session whose config disables the other side's negatives, so its
  ``pos_rank`` is exactly that side's rank; predict's ``answer_partition_rank`` must equal it;
- predict's ``answer_rank`` (every partition) must fall within a numpy float64 brute force over
  all partitions (tests/storage/trained/numpy_scores.py: an interval only for candidates within
  1e-4 of the answer's score);
- the MRR recomputed from predict's ranks must equal eval's MRR of the whole path to 1e-6.

Parametrized over a standard linear operator with bias and global embeddings, dynamic
relations with complex_diagonal, and dot, cos and l2 with max_norm.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from numpy_scores import NumpyModel, rank_bounds

from pbg_core.config import parse_config
from pbg_core.edgelist import EdgeList
from pbg_core.types import Bucket, Side
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.trained import Model
from tasks.checkpoint import switch_version, write_checkpoint
from tasks.evaluate import evaluate_edge_path, open_eval_session
from tasks.plan import plan_training
from tasks.runs import opened_run
from tasks.sessions import close_training_session, open_training_session

DRUGS, DISEASES, CLUSTERS = 40, 32, 4
STANDARD = [("treats", "drug", "disease"), ("treated_by", "disease", "drug")]
DYNAMIC = ["treats", "causes", "prevents"]
TEST_EDGES = 24
# Each max_norm lies below the norms training reaches in its case (measured: dot and l2 rows up to
# about 1.0, cos rows up to 0.29), so lookups do renorm.
CASES: dict[str, dict[str, Any]] = {
    "linear_bias": {"operator": "linear", "comparator": "dot", "bias": True, "global_emb": True},
    "dynamic_complex": {"operator": "complex_diagonal", "comparator": "dot", "dynamic_relations": True},
    "dot_max_norm": {"operator": "translation", "comparator": "dot", "max_norm": 0.9},
    "cos_max_norm": {"operator": "diagonal", "comparator": "cos", "max_norm": 0.2},
    "l2_max_norm": {"operator": "affine", "comparator": "l2", "max_norm": 0.9},
}


def planted(rng: random.Random, dynamic: bool, count: int) -> list[tuple[str, str, str]]:
    """Edges within clusters: drug i and disease j meet when i and j share ``i % CLUSTERS``."""
    edges = []
    for _ in range(count):
        cluster = rng.randrange(CLUSTERS)
        drug = f"drug{rng.randrange(DRUGS // CLUSTERS) * CLUSTERS + cluster}"
        disease = f"disease{rng.randrange(DISEASES // CLUSTERS) * CLUSTERS + cluster}"
        if dynamic:
            edges.append((drug, rng.choice(DYNAMIC), disease))
        else:
            name, lhs, _ = rng.choice(STANDARD)
            edges.append((drug, name, disease) if lhs == "drug" else (disease, name, drug))
    return edges


def base_config(root: Path, dynamic: bool) -> dict[str, Any]:
    relations = (
        [{"name": "all", "lhs": "drug", "rhs": "disease"}]
        if dynamic
        else [{"name": name, "lhs": lhs, "rhs": rhs} for name, lhs, rhs in STANDARD]
    )
    return {
        "entities": {"drug": {"num_partitions": 2}, "disease": {"num_partitions": 2}},
        "relations": relations,
        "dynamic_relations": dynamic,
        "entity_path": str(root / "entities"),
        "edge_paths": [str(root / "train"), str(root / "test")],
        "checkpoint_path": str(root / "unused"),
        "dimension": 8,
        "global_emb": False,
        "num_epochs": 3,
        "batch_size": 50,
        "num_uniform_negs": 0,
        "lr": 0.1,
        "loss_fn": "softmax",
        "eval_fraction": 0.0,
        "workers": 1,
        "hogwild_delay": 0.0,
        "seed": 0,
    }


@dataclass(frozen=True)
class Graph:
    """An imported graph: its config dict, its test edges by name, and one edge path per test edge."""

    raw: dict[str, Any]
    edges: list[tuple[str, str, str]]  # (head, relation, tail) of the test path, in bucket order
    one_edge_paths: list[str]
    known: list[tuple[str, str, str]]  # every edge of the train and test paths


def imported_graph(root: Path, dynamic: bool) -> Graph:
    rng = random.Random(7)
    train, test = planted(rng, dynamic, 400), planted(rng, dynamic, TEST_EDGES)
    raw = base_config(root, dynamic)
    for name, edges in (("train", train), ("test", test)):
        (root / f"{name}.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in edges))
    inputs = [str(root / "train.tsv"), str(root / "test.tsv")]
    import_edges(parse_config(raw), inputs, ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=0)
    named, paths = split_test_edges(raw, root / "one_edge")
    return Graph(raw, named, paths, train + test)


def split_test_edges(raw: dict[str, Any], one_edge: Path) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The test path's edges by name, and a one-edge edge path for each (every bucket file, one edge in all)."""
    entities = EntityStore(raw["entity_path"])
    relation_names = entities.load_dynamic_relation_names() if raw["dynamic_relations"] else None
    buckets = [Bucket(lhs, rhs) for lhs in range(2) for rhs in range(2)]
    store, named, paths = EdgeStore(raw["edge_paths"][1]), [], []
    empty = EdgeList.from_tensors(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), 0)
    for bucket in buckets:
        edges = store.load(bucket)
        for i in range(len(edges)):
            rel = int(edges.rel[i])
            spec = raw["relations"][0 if relation_names else rel]
            head = entities.load_names(spec["lhs"], bucket.lhs)[int(edges.lhs.tensor[i])]
            tail = entities.load_names(spec["rhs"], bucket.rhs)[int(edges.rhs.tensor[i])]
            named.append((head, relation_names[rel] if relation_names else spec["name"], tail))
            path = EdgeStore(str(one_edge / str(len(paths))))
            for other in buckets:
                path.save(other, edges[i : i + 1] if other == bucket else empty)
            paths.append(path.url)
    return named, paths


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Graph]:
    """The standard and the dynamic graph, imported once."""
    return {dynamic: imported_graph(tmp_path_factory.mktemp(f"dynamic{dynamic}"), dynamic) for dynamic in (False, True)}


def trained(graph: Graph, case: dict[str, Any], checkpoint: Path, train_buckets: Any) -> dict[str, Any]:
    """The config dict of ``case``, trained (every iteration committed) into ``checkpoint``."""
    settings = dict(case)
    operator = settings.pop("operator")
    relations = [{**rel, "operator": operator, "all_negs": True} for rel in graph.raw["relations"]]
    raw = {**graph.raw, **settings, "relations": relations, "checkpoint_path": str(checkpoint)}
    train = {**raw, "edge_paths": raw["edge_paths"][:1]}
    with opened_run(parse_config(train)) as run:
        handle = open_training_session.fn(run)
        try:
            for iteration in plan_training.fn(run).remaining:
                train_buckets(handle, iteration)
                write_checkpoint.fn(handle, iteration)
                switch_version.fn(handle, iteration)
        finally:
            close_training_session.fn(handle)
    return raw


def eval_side_ranks(raw: dict[str, Any], disabled: str, paths: list[str], filters: list[str] | None) -> list[int]:
    """``pbg eval``'s rank of each one-edge path, the other side's negatives disabled."""
    with opened_run(parse_config({**raw, disabled: True})) as run:
        handle = open_eval_session.fn(run, filtered=True)
        try:
            results = [evaluate_edge_path.fn(handle, path, filters) for path in paths]
        finally:
            close_training_session.fn(handle)
    assert all(result["count"] == 1 for result in results)
    return [int(result["sums"]["pos_rank"]) for result in results]


def eval_mrr(raw: dict[str, Any], path: str, filters: list[str] | None) -> float:
    """``pbg eval``'s MRR of a whole edge path."""
    with opened_run(parse_config(raw)) as run:
        handle = open_eval_session.fn(run, filtered=True)
        try:
            result = evaluate_edge_path.fn(handle, path, filters)
        finally:
            close_training_session.fn(handle)
    return float(result["sums"]["mrr"] / result["count"])


def per_query(table: pa.Table, column: str) -> np.ndarray:
    """``column`` of each query's first row, in query order."""
    queries = table.column("query").to_numpy()
    first = np.unique(queries, return_index=True)[1]
    return table.column(column).to_numpy()[first]


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest, graphs: dict[bool, Graph], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(graph, trained config dict) of one case."""
    settings = CASES[request.param]
    graph = graphs[bool(settings.get("dynamic_relations"))]
    raw = trained(
        graph, settings, tmp_path_factory.mktemp(request.param) / "ckpt", request.getfixturevalue("train_buckets")
    )
    return graph, raw


@pytest.mark.parametrize("filtered", [False, True], ids=["raw", "filtered"])
def test_predict_ranks_are_eval_ranks_edge_by_edge(case: Any, filtered: bool) -> None:
    graph, raw = case
    filters = raw["edge_paths"] if filtered else None
    model = Model.load(raw)
    heads, relations, tails = (list(column) for column in zip(*graph.edges, strict=True))
    reference = NumpyModel(parse_config(raw))
    known = known_answers(graph.known) if filtered else None
    reciprocal = np.zeros(len(heads))
    for side, disabled, anchors, answers in (
        (Side.RHS, "disable_lhs_negs", heads, tails),
        (Side.LHS, "disable_rhs_negs", tails, heads),
    ):
        form = "heads" if side is Side.RHS else "tails"
        table = model.predict(**{form: anchors}, relations=relations, answers=answers, k=1, filtered=filtered)
        partition_ranks = per_query(table, "answer_partition_rank")
        assert partition_ranks.tolist() == eval_side_ranks(raw, disabled, graph.one_edge_paths, filters)
        ranks = per_query(table, "answer_rank")
        for i, (anchor, relation, answer) in enumerate(zip(anchors, relations, answers, strict=True)):
            rel = model.relations.index(relation)
            scores, answer_score, names = reference.scores(side, rel, anchor, answer)
            excluded = known[(side, anchor, relation)] if known is not None else set()
            low, high = rank_bounds(scores, answer_score, names, answer, excluded)
            assert low <= ranks[i] <= high, (side, anchor, relation, answer, ranks[i], low, high)
            assert ranks[i] >= partition_ranks[i]
        reciprocal += 0.5 / partition_ranks
    assert abs(reciprocal.mean() - eval_mrr(raw, raw["edge_paths"][1], filters)) <= 1e-6


def known_answers(edges: list[tuple[str, str, str]]) -> dict[tuple[Side, str, str], set[str]]:
    """(side ranked, anchor, relation) -> the entities of that side known true."""
    known: dict[tuple[Side, str, str], set[str]] = defaultdict(set)
    for head, relation, tail in edges:
        known[(Side.RHS, head, relation)].add(tail)
        known[(Side.LHS, tail, relation)].add(head)
    return known
