"""Seeded synthetic knowledge graph shaped like a real one, written as TSV train/test splits.

Lines are ``head<TAB>rel<TAB>tail`` with string names (``e123``, ``rel7``): the layout both
importers read with ``--lhs-col 0 --rel-col 1 --rhs-col 2``.

Shape (defaults: 110k entities, 22 relations, 257k train edges, 1% more held out as test):
- relation frequencies are Zipf, ``P(rel k) ~ (k+1)^-rel_alpha``; the default exponent 1.17
  gives the largest relation about a third of the edges, the rarest under 1%;
- entity degrees are power-law: heads and tails are drawn independently from one Zipf law
  ``P(rank i) ~ (i+1)^-alpha`` over entities, mapped to ids by one random permutation, so an
  entity that is a popular head is a popular tail too (hubs such as countries or genres);
- every entity occurs at least once in the train split (a KG has no isolated entities): the
  first ``entities`` edges each take one entity of a random permutation on a random side;
- no self-loops and no duplicate triples (within and across the splits), as in curated KGs.

The test split is drawn from the same law after the train edges, so its entities all occur in
train and no test triple is a train triple (filtered evaluation stays meaningful).

Run: ``python -m bench.lib.graphs.kg --out kg.tsv`` writes ``kg.tsv`` (train) and ``kg.test.tsv``;
``ensure_kg`` (used by bench.speed and bench.whole_run) caches both by parameters.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.lib.graphs.powerlaw import cached_summary, save_summary, write_tsv, zipf_probabilities

_OVERSAMPLE = 1.25  # candidate edges per kept edge: self-loops and duplicates are dropped


@dataclass(frozen=True)
class KGShape:
    """Parameters of one synthetic knowledge graph (all of them go into the cache key)."""

    entities: int = 110_000
    relations: int = 22
    train_edges: int = 257_000
    test_edges: int = 2_570
    alpha: float = 0.8
    rel_alpha: float = 1.17
    seed: int = 0

    def scaled(self, shrink: int) -> KGShape:
        """The same shape with entity and edge counts divided by ``shrink`` (smoke runs)."""
        return KGShape(
            self.entities // shrink,
            self.relations,
            self.train_edges // shrink,
            max(self.test_edges // shrink, 1),
            self.alpha,
            self.rel_alpha,
            self.seed,
        )


def test_path(train_path: Path) -> Path:
    """Where the held-out split of the KG whose train split is ``train_path`` goes."""
    return train_path.with_name(f"{train_path.stem}.test{train_path.suffix}")


def _draw(rng: np.random.Generator, probabilities: np.ndarray, count: int) -> np.ndarray:
    """``count`` inverse-CDF draws of indices from ``probabilities`` (int64)."""
    cumulative = np.cumsum(probabilities)
    cumulative[-1] = 1.0  # guard against a last bin lost to rounding
    ranks = np.searchsorted(cumulative, rng.random(count), side="right")
    return np.minimum(ranks, len(probabilities) - 1).astype(np.int64)


def _candidates(shape: KGShape, rng: np.random.Generator) -> np.ndarray:
    """Candidate (head, rel, tail) rows, the coverage edges first; may hold loops and duplicates."""
    count = int((shape.train_edges + shape.test_edges) * _OVERSAMPLE) + 1_000
    if count < shape.entities:
        raise ValueError(f"{shape.train_edges} train edges cannot cover {shape.entities} entities")
    entity_of_rank = rng.permutation(shape.entities)
    popularity = zipf_probabilities(shape.entities, shape.alpha)
    heads = entity_of_rank[_draw(rng, popularity, count)]
    tails = entity_of_rank[_draw(rng, popularity, count)]
    rels = _draw(rng, zipf_probabilities(shape.relations, shape.rel_alpha), count)
    # Coverage: edge i < entities carries entity perm[i] as its head or its tail.
    covered = rng.permutation(shape.entities)
    on_head = rng.random(shape.entities) < 0.5
    heads[: shape.entities] = np.where(on_head, covered, heads[: shape.entities])
    tails[: shape.entities] = np.where(on_head, tails[: shape.entities], covered)
    return np.stack([heads, rels, tails], axis=1)


def _unique_in_order(rows: np.ndarray) -> np.ndarray:
    """``rows`` without self-loops and repeated triples, first occurrences kept in order."""
    rows = rows[rows[:, 0] != rows[:, 2]]
    _, first = np.unique(rows, axis=0, return_index=True)
    return rows[np.sort(first)]


def generate_kg(shape: KGShape) -> tuple[np.ndarray, np.ndarray]:
    """Draw the (train, test) splits as int64 ``(n, 3)`` arrays of (head, rel, tail) ids.

    Raises:
        ValueError: If a count is not positive, the edges cannot cover the entities, or too
            many candidates were duplicates to fill both splits.
    """
    for name in ("entities", "relations", "train_edges", "test_edges"):
        if getattr(shape, name) <= 0:
            raise ValueError(f"{name} must be > 0, got {getattr(shape, name)}")
    rng = np.random.default_rng(shape.seed)
    rows = _unique_in_order(_candidates(shape, rng))
    if len(rows) < shape.train_edges:
        raise ValueError(f"only {len(rows)} distinct triples drawn; lower alpha or the edge count")
    train, rest = rows[: shape.train_edges], rows[shape.train_edges :]
    # A coverage edge dropped as a loop or duplicate can leave an entity out of train:
    # test edges must only name entities that train has.
    in_train = np.zeros(shape.entities, dtype=bool)
    in_train[train[:, [0, 2]].ravel()] = True
    test = rest[in_train[rest[:, 0]] & in_train[rest[:, 2]]][: shape.test_edges]
    if len(test) < shape.test_edges:
        raise ValueError(f"only {len(test)} test triples drawn; lower alpha or the edge count")
    # Shuffle train so the coverage edges are not all at the top of the file.
    return train[rng.permutation(len(train))], test


def kg_summary(train: np.ndarray, test: np.ndarray, relations: int) -> dict[str, object]:
    """Edges, distinct entities, per-relation shares and degree maxima of the train split."""
    degree = np.bincount(np.concatenate([train[:, 0], train[:, 2]]))
    shares = np.bincount(train[:, 1], minlength=relations) / len(train)
    return {
        "train_edges": len(train),
        "test_edges": len(test),
        "distinct_entities": int(np.count_nonzero(degree)),
        "distinct_relations": int(np.count_nonzero(shares)),
        "relation_shares": [round(float(share), 4) for share in shares],
        "max_degree": int(degree.max()),
        "median_degree": float(np.median(degree[degree > 0])),
        "max_out_degree": int(np.bincount(train[:, 0]).max()),
        "max_in_degree": int(np.bincount(train[:, 2]).max()),
    }


def ensure_kg(path: Path, shape: KGShape) -> dict[str, object]:
    """Write ``path`` (train) and its test split unless cached with this shape; return the summary."""
    params = asdict(shape)
    cached = cached_summary(path, params)
    if cached is not None and test_path(path).exists():
        return cached
    train, test = generate_kg(shape)
    write_tsv(test_path(path), *test.T, node_prefix="e", rel_prefix="rel")
    write_tsv(path, *train.T, node_prefix="e", rel_prefix="rel")
    summary = kg_summary(train, test, shape.relations)
    save_summary(path, params, summary)
    return summary


def format_summary(summary: dict[str, object]) -> str:
    """Human-readable lines: sizes, degree maxima and the relation shares in percent."""
    shares = " ".join(f"{100 * s:.1f}" for s in summary["relation_shares"])
    return (
        f"train edges {summary['train_edges']:,}, test edges {summary['test_edges']:,}, "
        f"entities {summary['distinct_entities']:,}, relations {summary['distinct_relations']}\n"
        f"max degree {summary['max_degree']:,} (out {summary['max_out_degree']:,}, "
        f"in {summary['max_in_degree']:,}), median degree {summary['median_degree']:g}\n"
        f"relation shares %: {shares}"
    )


def main(argv: list[str] | None = None) -> int:
    defaults = KGShape()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=defaults.entities)
    parser.add_argument("--relations", type=int, default=defaults.relations)
    parser.add_argument("--train-edges", type=int, default=defaults.train_edges)
    parser.add_argument("--test-edges", type=int, default=defaults.test_edges)
    parser.add_argument("--alpha", type=float, default=defaults.alpha, help="entity Zipf exponent")
    parser.add_argument("--rel-alpha", type=float, default=defaults.rel_alpha, help="relation Zipf exponent")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--out", type=Path, required=True, help="train TSV path (test: <stem>.test<suffix>)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    shape = KGShape(
        args.entities, args.relations, args.train_edges, args.test_edges, args.alpha, args.rel_alpha, args.seed
    )
    summary = ensure_kg(args.out, shape)
    print(json.dumps(summary) if args.json else format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
