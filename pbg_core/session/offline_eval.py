"""Offline evaluation of a committed checkpoint (PBG's ``torchbiggraph_eval``).

Buckets are visited in lexicographic order; each bucket's edges are ranked by
the worker pool with the config's own negatives. With filter sources, the same
bucket of every filter edge path is indexed (vectorized) and its known true
edges are removed from the negatives, which makes filtered metrics work with any
number of entity types, relations and partitions. A sampled evaluation passes the
sampled positions of each bucket (:func:`pbg_core.evaluation.sampling.sample_edge_positions`):
buckets without any are not loaded, and only the sampled edges are ranked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.evaluation.metrics import FilterIndex
from pbg_core.ports import EdgeSource
from pbg_core.session.engine import TrainingSession
from pbg_core.stats import Stats
from pbg_core.types import Bucket

logger = logging.getLogger(__name__)


def evaluate_edge_source(
    session: TrainingSession,
    source: EdgeSource,
    filter_sources: Sequence[EdgeSource] | None = None,
    positions: Mapping[Bucket, torch.Tensor] | None = None,
) -> Stats:
    """Rank every edge of ``source`` against the session's (read-only) checkpoint.

    Args:
        session: A session opened read-only on the committed version.
        source: The edge path to evaluate.
        filter_sources: Edge paths whose edges are known true (filtered metrics), or None.
        positions: Sampled evaluation: the positions to rank in each bucket (a bucket not
            in it is skipped); None ranks every edge.

    Returns:
        Metric sums over all edges of ``source``.
    """
    totals: list[Stats] = []
    for bucket in session.settings.buckets():
        wanted = positions.get(bucket) if positions is not None else None
        if (positions is not None and (wanted is None or wanted.numel() == 0)) or source.num_edges(bucket) == 0:
            continue
        session.swap_partitions(bucket)
        edges = source.load_chunk(bucket, 0, 1, shared=wanted is None)
        if wanted is not None:
            edges = edges[wanted]  # a copy of the sampled rows only; evaluate_edges shares it
        filter_index = None
        if filter_sources is not None:
            known = [f.load_chunk(bucket, 0, 1) for f in filter_sources if f.num_edges(bucket) > 0]
            filter_index = FilterIndex.build(EdgeList.cat(known)) if known else None
        stats = session.evaluate_edges(bucket, edges, filter_index, where=str(getattr(source, "url", "edges")))
        logger.info("eval bucket %s: %s", tuple(bucket), stats.format())
        totals.append(stats)
    return Stats.sum(totals)
