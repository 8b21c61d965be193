"""Seeded synthetic power-law directed multigraph, written as a TSV edge list.

Each line is ``lhs<TAB>rel<TAB>rhs`` with string ids (``n123``, ``r4``), the layout both importers
(``torchbiggraph_import_from_tsv`` and ``pbg import``) read with ``--lhs-col 0 --rel-col 1
--rhs-col 2``.

Degree model: each endpoint is drawn independently from a Zipf-like law ``P(i) ~ (i+1)^-alpha``
over the node ranks, and the rank -> id map is a separate random permutation per side, so
out-degree and in-degree are both heavy-tailed but uncorrelated with the id and with each other
(the shape of follower graphs like LiveJournal; self-loops and duplicates are allowed, as PBG
allows them). Relations are drawn uniformly. A node that no edge touches does not exist for the
importers, so the number of distinct nodes is reported; with the defaults (200k nodes, 2M edges,
alpha 0.8) almost every node appears.

Run: ``python -m bench.lib.graphs.powerlaw --nodes 200000 --edges 2000000 --relations 1 --seed 0 --out g.tsv``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

_WRITE_BLOCK = 200_000  # lines formatted per write: bounds memory of the string building


def zipf_probabilities(num_nodes: int, alpha: float) -> np.ndarray:
    """Normalised ``(rank+1)^-alpha`` probabilities over ``num_nodes`` ranks.

    Args:
        num_nodes: Number of ranks, > 0.
        alpha: Power-law exponent, >= 0 (0 gives the uniform law).

    Returns:
        float64 array of length ``num_nodes`` summing to 1.

    Raises:
        ValueError: If ``num_nodes <= 0`` or ``alpha < 0``.
    """
    if num_nodes <= 0:
        raise ValueError(f"num_nodes must be > 0, got {num_nodes}")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    weights = np.arange(1, num_nodes + 1, dtype=np.float64) ** -alpha
    return weights / weights.sum()


def generate_edges(
    num_nodes: int, num_edges: int, num_relations: int, seed: int, alpha: float = 0.8
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``num_edges`` edges as (lhs ids, relation ids, rhs ids), all int64.

    Args:
        num_nodes: Size of the id space ``[0, num_nodes)``.
        num_edges: Number of edges, > 0.
        num_relations: Number of relation types, > 0.
        seed: Seed of the only random generator used, so output is reproducible.
        alpha: Zipf exponent of both degree laws.

    Returns:
        Three int64 arrays of length ``num_edges``.

    Raises:
        ValueError: If a count is not positive.
    """
    for name, value in (("num_edges", num_edges), ("num_relations", num_relations)):
        if value <= 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(zipf_probabilities(num_nodes, alpha))
    cumulative[-1] = 1.0  # guard against a last bin lost to rounding

    def draw_side() -> np.ndarray:
        # Inverse-CDF sampling: searchsorted is O(E log N) and avoids rng.choice's per-call setup.
        ranks = np.searchsorted(cumulative, rng.random(num_edges), side="right")
        return rng.permutation(num_nodes)[np.minimum(ranks, num_nodes - 1)]

    lhs = draw_side()
    rhs = draw_side()
    rel = rng.integers(0, num_relations, size=num_edges, dtype=np.int64)
    return lhs.astype(np.int64), rel, rhs.astype(np.int64)


def write_tsv(
    path: Path,
    lhs: np.ndarray,
    rel: np.ndarray,
    rhs: np.ndarray,
    node_prefix: str = "n",
    rel_prefix: str = "r",
) -> None:
    """Write ``n{lhs}\\tr{rel}\\tn{rhs}`` lines to ``path`` (parent directories created).

    ``node_prefix`` and ``rel_prefix`` replace the ``n`` and ``r`` of the names.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as out:
        for start in range(0, len(lhs), _WRITE_BLOCK):
            stop = start + _WRITE_BLOCK
            rows = zip(lhs[start:stop].tolist(), rel[start:stop].tolist(), rhs[start:stop].tolist(), strict=True)
            out.write("".join(f"{node_prefix}{a}\t{rel_prefix}{r}\t{node_prefix}{b}\n" for a, r, b in rows))
    tmp.replace(path)  # a half-written file never carries the final name


def graph_summary(lhs: np.ndarray, rel: np.ndarray, rhs: np.ndarray) -> dict[str, int]:
    """Counts a benchmark report needs: edges, distinct nodes/relations, max degrees."""
    return {
        "edges": len(lhs),
        "distinct_nodes": int(np.unique(np.concatenate([lhs, rhs])).size),
        "distinct_relations": int(np.unique(rel).size),
        "max_out_degree": int(np.bincount(lhs).max()),
        "max_in_degree": int(np.bincount(rhs).max()),
    }


def ensure_graph(
    path: Path, num_nodes: int, num_edges: int, num_relations: int, seed: int, alpha: float = 0.8
) -> dict[str, int]:
    """Write the graph unless ``path`` already holds it; return its summary.

    The summary is cached in ``<path>.json`` next to the TSV together with the parameters, so
    a cached file is reused only for identical parameters.
    """
    params = {"nodes": num_nodes, "edges": num_edges, "relations": num_relations, "seed": seed, "alpha": alpha}
    cached = cached_summary(path, params)
    if cached is not None:
        return cached
    lhs, rel, rhs = generate_edges(num_nodes, num_edges, num_relations, seed, alpha)
    write_tsv(path, lhs, rel, rhs)
    summary = graph_summary(lhs, rel, rhs)
    save_summary(path, params, summary)
    return summary


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def cached_summary(path: Path, params: dict[str, object]) -> dict[str, object] | None:
    """The summary cached next to ``path`` if it was written with exactly ``params``, else None."""
    meta_path = _meta_path(path)
    if path.exists() and meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("params") == params:
            return meta["summary"]
    return None


def save_summary(path: Path, params: dict[str, object], summary: dict[str, object]) -> None:
    """Cache ``summary`` and the ``params`` that produced ``path`` in ``<path>.json``."""
    _meta_path(path).write_text(json.dumps({"params": params, "summary": summary}, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--edges", type=int, default=2_000_000)
    parser.add_argument("--relations", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.8, help="Zipf exponent of the degrees")
    parser.add_argument("--out", type=Path, required=True, help="output TSV path")
    args = parser.parse_args(argv)
    summary = ensure_graph(args.out, args.nodes, args.edges, args.relations, args.seed, args.alpha)
    json.dump(summary, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
