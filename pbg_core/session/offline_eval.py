"""Offline evaluation of a committed checkpoint (PBG's ``torchbiggraph_eval``).

Buckets are visited in lexicographic order; each bucket's edges are ranked by
the worker pool with the config's own negatives. With filter sources, the same
bucket of every filter edge path is indexed (vectorized) and its known true
edges are removed from the negatives, which makes filtered metrics work with any
number of entity types, relations and partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pbg_core.edgelist import EdgeList
from pbg_core.evaluation.metrics import FilterIndex
from pbg_core.ports import EdgeSource
from pbg_core.session.engine import TrainingSession
from pbg_core.stats import Stats

logger = logging.getLogger(__name__)


def evaluate_edge_source(
    session: TrainingSession, source: EdgeSource, filter_sources: Sequence[EdgeSource] | None = None
) -> Stats:
    """Rank every edge of ``source`` against the session's (read-only) checkpoint.

    Args:
        session: A session opened read-only on the committed version.
        source: The edge path to evaluate.
        filter_sources: Edge paths whose edges are known true (filtered metrics), or None.

    Returns:
        Metric sums over all edges of ``source``.
    """
    totals: list[Stats] = []
    for bucket in session.settings.buckets():
        if source.num_edges(bucket) == 0:
            continue
        session.swap_partitions(bucket)
        edges = source.load_chunk(bucket, 0, 1, shared=True)
        filter_index = None
        if filter_sources is not None:
            known = [f.load_chunk(bucket, 0, 1) for f in filter_sources if f.num_edges(bucket) > 0]
            filter_index = FilterIndex.build(EdgeList.cat(known)) if known else None
        stats = session.evaluate_edges(bucket, edges, filter_index, where=str(getattr(source, "url", "edges")))
        logger.info("eval bucket %s: %s", tuple(bucket), stats.format())
        totals.append(stats)
    return Stats.sum(totals)
