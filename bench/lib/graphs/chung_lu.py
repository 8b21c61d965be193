"""A seeded LiveJournal-shaped graph: directed Chung-Lu with power-law weights, as two TSV files.

Model: node ``i`` gets an out-weight and an in-weight ``(rank + 1)^-alpha``, ranks drawn from two
independent random permutations (out- and in-degree heavy-tailed, uncorrelated with the id and
with each other). An edge's source is drawn with probability proportional to the out-weight and
its target proportional to the in-weight (Chung-Lu, sampled by inverse CDF, numpy-vectorised
in chunks of ``CHUNK`` edges). With ``alpha = 0.5`` the expected degrees follow a power law of
exponent ``1 + 1/alpha = 3``; at LiveJournal's size (4.85M nodes, 68.5M edges) the largest
expected out/in-degree is about 15k, near LiveJournal's own (about 20k out, 14k in).

Planted communities (so that ranking quality means something: a plain Chung-Lu graph has no
structure beyond its degrees, and every model ranks at chance): node ``i`` belongs to community
``i % communities``. A ``mix`` share of the edges draws its target from the whole graph as above;
the rest draws it from the source's own community, still proportional to the in-weight (one
cumulative array over the nodes grouped by community, each draw confined to its community's
range). ``communities = 0`` gives the plain Chung-Lu graph.

Self-loops are dropped and redrawn; duplicate edges are removed (LiveJournal is a simple graph)
and redrawn until exactly ``num_edges`` distinct edges exist, so the counts are exact. The edges
are then shuffled (seeded) and the first ``test_fraction`` of them become the test split.
Memory: the edge set is held as one int64 key per edge (``lhs * nodes + rhs``: 548 MB at full
size) and ``np.unique`` makes one sorted copy, so about 1.7 GB at the peak.

Files: ``train.tsv`` and ``test.tsv`` with lines ``<lhs>\\t<rhs>`` (integer node ids, no relation
column, as SNAP's soc-LiveJournal1.txt), written with pyarrow's CSV writer; ``graph.json`` holds
the parameters and a summary, and a later call with the same parameters reuses the files.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

CHUNK = 4_000_000  # edges drawn per vectorised step: bounds the temporary float64/int64 arrays
WRITE_ROWS = 2_000_000  # rows per pyarrow write
FULL_NODES = 4_847_571  # soc-LiveJournal1: nodes
FULL_EDGES = 68_475_391  # soc-LiveJournal1: directed edges


@dataclass(frozen=True)
class GraphParams:
    """What determines the files: a change of any field writes a new graph."""

    nodes: int
    edges: int
    seed: int
    alpha: float
    test_fraction: float
    communities: int = 0
    mix: float = 1.0

    def tag(self) -> str:
        """Directory name for this graph."""
        tag = f"n{self.nodes}-e{self.edges}-s{self.seed}-a{self.alpha:g}-t{self.test_fraction:g}"
        return tag + (f"-c{self.communities}-m{self.mix:g}" if self.communities else "")


def scaled(
    scale: float, seed: int, alpha: float = 0.5, test_fraction: float = 0.01, community_size: int = 0, mix: float = 1.0
) -> GraphParams:
    """LiveJournal's node and edge counts times ``scale`` (each at least 2 nodes / 100 edges).

    ``community_size`` > 0 plants ``nodes // community_size`` communities (at least 2) with a
    ``mix`` share of the edges crossing between them at random.
    """
    if not 0 < scale <= 1:
        raise ValueError(f"--scale must be in (0, 1], got {scale}")
    if not 0 <= mix <= 1:
        raise ValueError(f"--mix must be in [0, 1], got {mix}")
    nodes = max(2, round(FULL_NODES * scale))
    communities = max(2, nodes // community_size) if community_size > 0 else 0
    return GraphParams(nodes, max(100, round(FULL_EDGES * scale)), seed, alpha, test_fraction, communities, mix)


@dataclass(frozen=True)
class Communities:
    """In-weights laid out by community: ``order`` lists the nodes grouped by community, ``cum``
    is the running sum of their in-weights, ``lo``/``hi`` bound each community's range of it."""

    order: np.ndarray
    cum: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    last: np.ndarray  # index in ``order`` of each community's last node


def communities_of(side: tuple[np.ndarray, np.ndarray], alpha: float, count: int) -> Communities:
    """The in-side's weights regrouped so one draw can be confined to a community."""
    ranks_to_ids = side[1]
    nodes = len(ranks_to_ids)
    weight = np.empty(nodes, dtype=np.float64)
    weight[ranks_to_ids] = np.arange(1, nodes + 1, dtype=np.float64) ** -alpha
    order = np.argsort(np.arange(nodes) % count, kind="stable")
    cum = np.cumsum(weight[order])
    ends = np.cumsum(np.bincount(np.arange(nodes) % count, minlength=count))
    lo = np.concatenate([[0.0], cum[ends[:-1] - 1]])
    return Communities(order, cum, lo, cum[ends - 1], ends - 1)


def _draw_within(rng: np.random.Generator, planted: Communities, sources: np.ndarray) -> np.ndarray:
    """A target per source from the source's own community, proportional to the in-weight."""
    group = sources % len(planted.lo)
    u = planted.lo[group] + rng.random(len(sources)) * (planted.hi[group] - planted.lo[group])
    index = np.minimum(np.searchsorted(planted.cum, u, side="right"), planted.last[group])
    return planted.order[index]


def _cdf(rng: np.random.Generator, nodes: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(cumulative weights by rank, rank -> node id) for one side."""
    cumulative = np.cumsum(np.arange(1, nodes + 1, dtype=np.float64) ** -alpha)
    cumulative /= cumulative[-1]
    return cumulative, rng.permutation(nodes).astype(np.int64)


def _draw(rng: np.random.Generator, side: tuple[np.ndarray, np.ndarray], count: int) -> np.ndarray:
    cumulative, ids = side
    ranks = np.searchsorted(cumulative, rng.random(count), side="right")
    return ids[np.minimum(ranks, len(ids) - 1)]


def _fill(
    rng: np.random.Generator, params: GraphParams, sides: tuple, planted: Communities | None, out: np.ndarray
) -> None:
    """Fill ``out`` with edge keys ``lhs * nodes + rhs`` without self-loops, in chunks."""
    filled = 0
    while filled < len(out):
        count = min(CHUNK, len(out) - filled)
        lhs, rhs = _draw(rng, sides[0], count), _draw(rng, sides[1], count)
        if planted is not None:
            inside = rng.random(count) >= params.mix
            rhs[inside] = _draw_within(rng, planted, lhs[inside])
        keep = lhs != rhs  # self-loops are redrawn by the next round of the loop
        keys = lhs[keep] * params.nodes + rhs[keep]
        out[filled : filled + len(keys)] = keys
        filled += len(keys)


def edge_keys(params: GraphParams) -> tuple[np.ndarray, dict[str, int]]:
    """Exactly ``params.edges`` distinct non-loop edge keys in a seeded random order, and counts.

    Raises:
        ValueError: if ``params.edges`` exceeds half of the ``nodes * (nodes - 1)`` possible
            directed edges (past that, redrawing duplicates under a skewed law may not end).
    """
    if params.edges > params.nodes * (params.nodes - 1) // 2:
        raise ValueError(
            f"{params.edges} edges: at most half of the {params.nodes * (params.nodes - 1)} directed "
            f"edges of {params.nodes} nodes are allowed ({params.nodes * (params.nodes - 1) // 2})"
        )
    rng = np.random.default_rng(params.seed)
    sides = (_cdf(rng, params.nodes, params.alpha), _cdf(rng, params.nodes, params.alpha))
    planted = communities_of(sides[1], params.alpha, params.communities) if params.communities else None
    keys = np.empty(params.edges, dtype=np.int64)
    _fill(rng, params, sides, planted, keys)
    keys = np.unique(keys)  # sorted and distinct: duplicates are redrawn below
    redrawn = 0
    while (missing := params.edges - len(keys)) > 0:
        redrawn += missing
        extra = np.empty(missing, dtype=np.int64)
        _fill(rng, params, sides, planted, extra)
        keys = _merge_new(keys, extra)
    rng.shuffle(keys)
    return keys, {"duplicates_redrawn": redrawn}


def _merge_new(keys: np.ndarray, extra: np.ndarray) -> np.ndarray:
    """``np.unique(concatenate([keys, extra]))`` for sorted distinct ``keys``, without sorting them again.

    The redraw rounds' tail is thousands of keys against tens of millions: one sort of the
    whole set per round made the full-size graph take over ten minutes.
    """
    extra = np.unique(extra)
    at = np.searchsorted(keys, extra)
    seen = (at < len(keys)) & (keys[np.minimum(at, len(keys) - 1)] == extra)
    return np.insert(keys, at[~seen], extra[~seen])


def _write(path: Path, keys: np.ndarray, nodes: int) -> None:
    """``lhs\\trhs`` lines (no header, no quotes) to ``path`` through a temporary name."""
    tmp = path.with_name(path.name + ".tmp")
    schema = pa.schema([("lhs", pa.int64()), ("rhs", pa.int64())])
    options = pa_csv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    with pa_csv.CSVWriter(str(tmp), schema, write_options=options) as writer:
        for start in range(0, len(keys), WRITE_ROWS):
            block = keys[start : start + WRITE_ROWS]
            writer.write_table(pa.table({"lhs": block // nodes, "rhs": block % nodes}, schema=schema))
    tmp.replace(path)


def summarize(keys: np.ndarray, nodes: int, test_size: int, communities: int = 0) -> dict[str, int]:
    """Edges inside a community, distinct nodes, maximum degrees, test nodes absent from train."""
    lhs, rhs = keys // nodes, keys % nodes
    out_deg, in_deg = np.bincount(lhs, minlength=nodes), np.bincount(rhs, minlength=nodes)
    train_seen = np.zeros(nodes, dtype=bool)
    train_seen[lhs[test_size:]] = True
    train_seen[rhs[test_size:]] = True
    test_nodes = np.unique(np.concatenate([lhs[:test_size], rhs[:test_size]]))
    return {
        "within_community_edges": int(np.count_nonzero(lhs % communities == rhs % communities)) if communities else 0,
        "distinct_nodes": int(np.count_nonzero(out_deg + in_deg)),
        "max_out_degree": int(out_deg.max()),
        "max_in_degree": int(in_deg.max()),
        "median_degree": int(np.median(out_deg + in_deg)),
        "test_nodes_not_in_train": int(np.count_nonzero(~train_seen[test_nodes])),
    }


def ensure_graph(params: GraphParams, directory: Path) -> dict[str, object]:
    """Write ``train.tsv``/``test.tsv`` in ``directory`` unless they exist for ``params``.

    Returns:
        ``{"params", "summary", "train", "test", "cached"}`` (paths as strings).
    """
    meta_path = directory / "graph.json"
    files = {"train": directory / "train.tsv", "test": directory / "test.tsv"}
    if meta_path.exists() and all(p.exists() for p in files.values()):
        meta = json.loads(meta_path.read_text())
        if meta.get("params") == asdict(params):
            return {**meta, "cached": True}
    directory.mkdir(parents=True, exist_ok=True)
    meta_path.unlink(missing_ok=True)  # written last: its presence means the files are complete
    keys, counts = edge_keys(params)
    test_size = round(len(keys) * params.test_fraction)
    _write(files["test"], keys[:test_size], params.nodes)
    _write(files["train"], keys[test_size:], params.nodes)
    summary = {"train_edges": len(keys) - test_size, "test_edges": test_size, **counts}
    summary.update(summarize(keys, params.nodes, test_size, params.communities))
    meta = {"params": asdict(params), "summary": summary, **{k: str(p) for k, p in files.items()}}
    meta_path.write_text(json.dumps(meta, indent=2))
    return {**meta, "cached": False}
