"""Holding out a fraction of an imported edge path, in place, for a retraining run's quality gate.

Which edges are held out is a pure function of each edge (a seeded 64-bit hash of its lhs, rhs and
relation), not of its position: the split needs no record of its own and may be repeated at any
point. Per bucket, the held-out edges are written to the holdout path first, then the edge path
is rewritten without them (each file atomically). A bucket whose edge path still holds edges the
hash selects (first run, or a run killed between the two writes) is split, and its holdout file
replaced by exactly those edges; one that holds none was split already and is left alone. So a
retry never loses, duplicates or moves an edge twice. Duplicates of a held-out edge are held out
with it (one seed serves every generation), so no copy of a test edge in a split path is
trained. A finished split records its fraction and seed (``split.json`` in the holdout
directory); a later call with others keeps the recorded ones, so no held-out edge is ever lost.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pbg_core.edgelist import EdgeList
from storage import layout
from storage.edges import EdgeStore
from storage.errors import DataNotFound
from storage.fs import atomic, reads, urls
from storage.fs.urls import StorageOptions

logger = logging.getLogger(__name__)

_SCALE = float(2**64)


def holdout_path_of(edge_path: str) -> str:
    """Where the held-out edges of ``edge_path`` go: ``x_partitioned`` -> ``x_holdout``, else ``x_holdout``."""
    return layout.holdout_dir(edge_path.rstrip("/"))


def held_out(edges: EdgeList, fraction: float, seed: int) -> torch.Tensor:
    """Boolean mask of the edges held out: a seeded hash of (lhs, rhs, rel) below ``fraction``."""
    if fraction <= 0 or len(edges) == 0:
        return torch.zeros(len(edges), dtype=torch.bool)
    with np.errstate(over="ignore"):  # the hash wraps around on purpose
        value = _mix(np.uint64(seed) + np.uint64(0x9E3779B97F4A7C15))
        for column in (edges.lhs.tensor, edges.rhs.tensor, edges.rel):
            value = _mix(value ^ column.numpy().astype(np.uint64))
    return torch.from_numpy(value.astype(np.float64) / _SCALE < fraction)


def _mix(x: np.ndarray | np.uint64) -> np.ndarray:
    """SplitMix64's finaliser: every input bit affects every output bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return np.asarray(x ^ (x >> np.uint64(31)))


@dataclass(frozen=True)
class SplitReport:
    """Edges kept for training and held out, over every bucket (the split done now or before)."""

    kept: int
    held: int


def split_holdout(edge_path: str, fraction: float, seed: int, storage_options: StorageOptions = None) -> SplitReport:
    """Move the held-out edges of every bucket of ``edge_path`` to :func:`holdout_path_of` (idempotent).

    Raises:
        DataNotFound: ``edge_path`` has no bucket files.
    """
    source = EdgeStore(edge_path, storage_options)
    holdout = EdgeStore(holdout_path_of(edge_path), storage_options)
    recorded = _recorded_split(holdout.url, storage_options)
    if recorded is not None and recorded != {"fraction": fraction, "seed": seed}:
        # Another fraction or seed would select other edges: the earlier holdout's would be lost.
        logger.warning(
            "%s was split with %s: kept as it is (asked for fraction %s, seed %s)", edge_path, recorded, fraction, seed
        )
        fraction, seed = float(recorded["fraction"]), int(recorded["seed"])
    kept = held = 0
    for bucket in source.list_buckets():
        edges = source.load(bucket)
        mask = held_out(edges, fraction, seed)
        if bool(mask.any()):
            holdout.save(bucket, edges[mask])  # first: a kill before the rewrite repeats this, same edges
            source.save(bucket, edges[~mask])
            kept, held = kept + int((~mask).sum()), held + int(mask.sum())
            continue
        kept += len(edges)
        if holdout.has_bucket(bucket):
            held += holdout.num_edges(bucket)
        else:
            holdout.save(bucket, edges[mask])  # an empty bucket: every bucket of the grid has a file
    if recorded is None:
        atomic.write_text_atomic(
            urls.join_url(holdout.url, layout.SPLIT_FILE),
            json.dumps({"fraction": fraction, "seed": seed}),
            storage_options,
        )
    logger.info("held out %d of %d edges of %s in %s", held, kept + held, edge_path, holdout_path_of(edge_path))
    return SplitReport(kept, held)


def _recorded_split(holdout_url: str, storage_options: StorageOptions) -> dict[str, Any] | None:
    """The fraction and seed a finished split recorded in its holdout directory, or None."""
    try:
        recorded = json.loads(reads.read_text(urls.join_url(holdout_url, layout.SPLIT_FILE), storage_options))
    except (DataNotFound, ValueError):
        return None
    return recorded if isinstance(recorded, dict) and {"fraction", "seed"} <= recorded.keys() else None


__all__ = ["SplitReport", "held_out", "holdout_path_of", "split_holdout"]
