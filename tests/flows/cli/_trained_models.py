"""Small trained models for the tests of ``pbg predict`` and ``pbg score``, and ``pbg eval``'s metrics of them.

``umls_model_in``: ``data/kg/umls/train.txt`` (5,216 edges, 135 entities of one type ``all``, 46
relation types, dynamic relations with ``complex_diagonal``, as ``examples/umls/config.py``) and the
first :data:`TEST_EDGES` lines of ``test.txt`` imported with the real importer (``pbg import``'s
code) into a train and a test edge path, then trained at dimension 16 for 5 epochs through the
training task bodies (``pbg train``'s session, seed 0, one worker; names recorded, older versions
removed): a real checkpoint in seconds.
Its ``config.json`` names both edge paths, so ``--filtered`` filters train and test edges, as the
demo's ``pbg eval --filtered`` does.

``drug_model_in``: two entity types (``drug`` in 2 partitions, ``disease`` in one), standard
relations ``treats`` (drug -> disease, linear) and ``interacts`` (drug -> drug), a seeded planted
graph trained the same way: what UMLS's single type cannot show (a name of the wrong type, the
default relation 0, a ranked type of several partitions).

:func:`eval_means` gives ``pbg eval``'s metrics of an edge path through its own task bodies, and
:func:`rank_means` the same metrics of a prediction's answer ranks.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pbg_core.config import parse_config
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from tasks.by_name import start_by_name
from tasks.checkpoint import remove_old_version, switch_version, write_checkpoint
from tasks.evaluate import evaluate_edge_path, open_eval_session
from tasks.plan import plan_training
from tasks.runs import opened_run
from tasks.sessions import close_training_session, open_training_session

UMLS = Path(__file__).resolve().parents[3] / "data" / "kg" / "umls"
TEST_EDGES = 40  # the first lines of test.txt: the test edge path and the query files
DRUGS = ["aspirin", "insulin", "metformin"] + [f"drug{i}" for i in range(21)]
DISEASES = ["diabetes", "asthma", "migraine"] + [f"disease{i}" for i in range(13)]


@dataclass(frozen=True)
class TrainedModel:
    """A trained model: its directory, config, and test edges by name."""

    root: Path
    raw: dict[str, Any]
    test_edges: list[tuple[str, str, str]]

    @property
    def config(self) -> Path:
        """The config file (JSON) the commands are given."""
        return self.root / "config.json"

    @property
    def checkpoint(self) -> Path:
        return Path(self.raw["checkpoint_path"])

    @property
    def test_tsv(self) -> Path:
        """The test edges, ``head<TAB>relation<TAB>tail`` per line."""
        return self.root / "test.tsv"


def umls_config(root: Path) -> dict[str, Any]:
    """The config of the UMLS example, smaller: dimension 16, 5 epochs, one worker, seeded."""
    data = root / "data"
    return {
        "entities": {"all": {"num_partitions": 1}},
        "relations": [{"name": "all_edges", "lhs": "all", "rhs": "all", "operator": "complex_diagonal"}],
        "dynamic_relations": True,
        "entity_path": str(data),
        "edge_paths": [str(data / "train"), str(data / "test")],
        "checkpoint_path": str(root / "model"),
        "dimension": 16,
        "global_emb": False,
        "comparator": "dot",
        "num_epochs": 5,
        "num_uniform_negs": 50,
        "loss_fn": "softmax",
        "lr": 0.1,
        "regularization_coef": 1e-3,
        "eval_fraction": 0.0,
        "workers": 1,
        "hogwild_delay": 0.0,
        "seed": 0,
    }


def train(raw: dict[str, Any], train_buckets: Callable[[str, Any], list[Any]]) -> None:
    """Train ``raw`` on its first edge path as ``pbg train`` does, through its task bodies: the names
    recorded, every iteration committed and the version before it removed."""
    with opened_run(parse_config({**raw, "edge_paths": raw["edge_paths"][:1]})) as run:
        plan = plan_training.fn(run)
        start_by_name.fn(run, plan.committed_version)
        handle = open_training_session.fn(run)
        try:
            for iteration in plan.remaining:
                train_buckets(handle, iteration)
                write_checkpoint.fn(handle, iteration)
                switch_version.fn(handle, iteration)
                remove_old_version.fn(handle, iteration)
        finally:
            close_training_session.fn(handle)


def eval_means(raw: dict[str, Any], path: str, filters: list[str] | None) -> dict[str, float]:
    """``pbg eval``'s metrics of edge path ``path`` (its own task bodies, ``all_negs``, filtered by
    ``filters``): each the mean over the edges of the mean over an edge's two sides."""
    relations = [{**relation, "all_negs": True} for relation in raw["relations"]]
    with opened_run(parse_config({**raw, "relations": relations, "num_uniform_negs": 0})) as run:
        handle = open_eval_session.fn(run, filtered=True)
        try:
            result = evaluate_edge_path.fn(handle, path, filters)
        finally:
            close_training_session.fn(handle)
    return {name: value / result["count"] for name, value in result["sums"].items()} | {"count": result["count"]}


def rank_means(tail_ranks: list[int], head_ranks: list[int]) -> dict[str, float]:
    """The same metrics from each edge's rank among the tails and among the heads."""
    pairs = list(zip(tail_ranks, head_ranks, strict=True))

    def mean(metric: Callable[[int], float]) -> float:
        return sum((metric(tail) + metric(head)) / 2 for tail, head in pairs) / len(pairs)

    return {
        "pos_rank": mean(float),
        "mrr": mean(lambda rank: 1 / rank),
        "r1": mean(lambda rank: float(rank <= 1)),
        "r10": mean(lambda rank: float(rank <= 10)),
        "count": len(pairs),
    }


def umls_model_in(root: Path, train_buckets: Callable[[str, Any], list[Any]]) -> TrainedModel:
    """The UMLS graph imported and trained in ``root`` (see the module docstring)."""
    lines = (UMLS / "test.txt").read_text().splitlines()[:TEST_EDGES]
    (root / "test.tsv").write_text("".join(f"{line}\n" for line in lines))
    raw = umls_config(root)
    options = ImportOptions(lhs_col=0, rhs_col=2, rel_col=1)
    import_edges(parse_config(raw), [str(UMLS / "train.txt"), str(root / "test.tsv")], options, seed=0)
    train(raw, train_buckets)
    (root / "config.json").write_text(json.dumps(raw))
    edges = [tuple(line.split("\t")) for line in lines]
    return TrainedModel(root, raw, [(head, relation, tail) for head, relation, tail in edges])


def drug_edges(rng: random.Random, count: int) -> list[tuple[str, str, str]]:
    """Edges within 4 clusters: drug i treats disease j and interacts with drug j when ``i % 4 == j % 4``."""
    edges = []
    for _ in range(count):
        drug = rng.randrange(len(DRUGS))
        if rng.random() < 0.7:
            disease = rng.randrange(len(DISEASES) // 4) * 4 + drug % 4
            edges.append((DRUGS[drug], "treats", DISEASES[disease]))
        else:
            other = rng.randrange(len(DRUGS) // 4) * 4 + drug % 4
            edges.append((DRUGS[drug], "interacts", DRUGS[other]))
    return edges


def drug_model_in(root: Path, train_buckets: Callable[[str, Any], list[Any]]) -> TrainedModel:
    """Two entity types, standard relations, trained in ``root`` (see the module docstring)."""
    rng = random.Random(3)
    train_edges, test_edges = drug_edges(rng, 300), drug_edges(rng, 12)
    for name, edges in (("train", train_edges), ("test", test_edges)):
        (root / f"{name}.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in edges))
    raw = {
        **umls_config(root),
        "entities": {"drug": {"num_partitions": 2}, "disease": {"num_partitions": 1}},
        "relations": [
            {"name": "treats", "lhs": "drug", "rhs": "disease", "operator": "linear"},
            {"name": "interacts", "lhs": "drug", "rhs": "drug", "operator": "translation"},
        ],
        "dynamic_relations": False,
        "dimension": 8,
        "num_uniform_negs": 10,
        "regularization_coef": 0.0,  # linear operators are not regularized
    }
    options = ImportOptions(lhs_col=0, rhs_col=2, rel_col=1)
    import_edges(parse_config(raw), [str(root / "train.tsv"), str(root / "test.tsv")], options, seed=0)
    train(raw, train_buckets)
    (root / "config.json").write_text(json.dumps(raw))
    return TrainedModel(root, raw, test_edges)
