"""Neighbor-mean initial rows for entities the ``init_path`` checkpoint never trained.

After ``pbg import --append`` a partition lists more entities than the ``init_path`` checkpoint
trained: its first rows are the old entities, the rest are new (:mod:`pbg_core.session.partition_reads`).
After a plain re-import the init rows are remapped by name first (:mod:`storage.remap`): the new
entities are then anywhere in a partition, and :attr:`GraphShape.fresh` lists them.
A new entity starts at random by default. With ``init_new_entities: neighbor_mean`` it starts as
the mean of the trained embeddings of its old neighbors over the run's edges (either side, any
relation): a cold entity then begins where its neighborhood is, instead of near the origin. Its
Adagrad sum starts as the mean of theirs too: a zero sum would make its first steps as large as a
fresh model's and throw the good start away (measured by bench/retrain_days.py).
New entities without an old neighbor stay random; featurized types are left alone (their rows
are features, not entities).

:func:`neighbor_means` reads each bucket once, keeps only the edges joining a new row to an old
one, then reads each old partition those edges touch once and averages. Memory: the new rows'
sums and the selected edges, never more than one old partition.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pbg_core.config import ConfigSchema
from pbg_core.edgelist import EdgeList
from pbg_core.ports import EdgeSource, PartitionStore
from pbg_core.session.build import build_topology, relation_sides
from pbg_core.types import Bucket, PartitionKey

logger = logging.getLogger(__name__)

# key -> (row offsets, initial vectors, initial Adagrad sums): the means of the neighbors' rows and sums.
CHUNK_EDGES = 10_000_000  # edges read at a time (about 240 MB of ids)
NewRows = dict[PartitionKey, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class GraphShape:
    """What :func:`neighbor_means` needs of the config and the entity files.

    Attributes:
        relation_sides: (lhs type, rhs type) per relation id.
        num_partitions: Partition count per entity type (1: unpartitioned).
        counts: Entity count per (type, partition) now.
        old_counts: Rows the init checkpoint holds per (type, partition), for those it holds.
        featurized: Featurized entity types (never averaged).
        buckets: Every bucket of the partition grid.
        fresh: Sorted offsets of the rows the init checkpoint holds but never trained, per
            (type, partition) it was remapped by name for (its rows are in the current layout).
    """

    relation_sides: Sequence[tuple[str, str]]
    num_partitions: Mapping[str, int]
    counts: Mapping[PartitionKey, int]
    old_counts: Mapping[PartitionKey, int]
    featurized: frozenset[str] = frozenset()
    buckets: Sequence[Bucket] = (Bucket(0, 0),)
    fresh: Mapping[PartitionKey, torch.Tensor] = field(default_factory=dict)

    def key(self, entity: str, part: int) -> PartitionKey:
        """The (type, partition) of an entity of ``entity`` in a bucket side of partition ``part``."""
        return (entity, part if self.num_partitions[entity] > 1 else 0)

    def new_rows(self) -> dict[PartitionKey, torch.Tensor]:
        """Sorted offsets of the rows the init checkpoint did not train, per key that has some.

        Those past its rows (appended since), or, for a key remapped by name, :attr:`fresh`.
        Featurized types are left out.
        """
        found: dict[PartitionKey, torch.Tensor] = {}
        for key, old in self.old_counts.items():
            if key[0] in self.featurized:
                continue
            offsets = self.fresh[key] if key in self.fresh else torch.arange(old, max(old, self.counts[key]))
            if len(offsets):
                found[key] = offsets
        return found


@dataclass(frozen=True)
class _Pairs:
    """Edges joining new rows of ``target`` to old rows of a neighbor partition."""

    target: PartitionKey
    rows: torch.Tensor  # positions of the new rows among the target's new rows
    neighbors: torch.Tensor  # offsets of their old neighbors


def neighbor_means(
    shape: GraphShape,
    sources: Iterable[EdgeSource],
    load_old: Callable[[PartitionKey], tuple[torch.Tensor, torch.Tensor]],
) -> NewRows:
    """Initial vectors of the new rows that have old neighbors, per (type, partition) with new rows.

    Args:
        shape: Relations, partitions and row counts (see :class:`GraphShape`).
        sources: The edge paths to take neighbors from.
        load_old: The init checkpoint's embeddings and Adagrad sums of a (type, partition) it holds.

    Returns:
        key -> (offsets of the rows given a mean, their vectors, their Adagrad sums); keys with
        none are left out.
    """
    new_rows = shape.new_rows()
    if not new_rows:
        return {}
    pairs: dict[PartitionKey, list[_Pairs]] = defaultdict(list)
    for source in sources:
        for bucket in shape.buckets:
            count = source.num_edges(bucket)
            chunks = -(-count // CHUNK_EDGES)  # a bucket is read a bounded chunk at a time
            for chunk in range(chunks):
                for neighbor, found in _pairs_in(shape, new_rows, bucket, source.load_chunk(bucket, chunk, chunks)):
                    pairs[neighbor].append(found)
    totals: dict[PartitionKey, torch.Tensor] = {}
    vectors: dict[PartitionKey, torch.Tensor] = {}
    sums: dict[PartitionKey, torch.Tensor] = {}
    for neighbor, items in pairs.items():
        embeddings, state = load_old(neighbor)
        for item in items:
            if item.target not in vectors:  # the dimension is the checkpoint's: known once one is read
                count = len(new_rows[item.target])
                vectors[item.target] = torch.zeros(count, embeddings.shape[1])
                totals[item.target], sums[item.target] = torch.zeros(count), torch.zeros(count)
            vectors[item.target].index_add_(0, item.rows, embeddings[item.neighbors])
            sums[item.target].index_add_(0, item.rows, state[item.neighbors])
            totals[item.target].index_add_(0, item.rows, torch.ones(len(item.rows)))
    result: NewRows = {}
    for key, total in totals.items():
        given = torch.nonzero(total > 0).flatten()
        given_count = total[given]
        result[key] = (
            new_rows[key][given],
            vectors[key][given] / given_count.unsqueeze(1),
            sums[key][given] / given_count,
        )
        logger.info(
            "%s partition %d: %d of %d new rows start as the mean of their trained neighbors",
            key[0],
            key[1],
            len(given),
            len(total),
        )
    return result


def _pairs_in(
    shape: GraphShape, new_rows: Mapping[PartitionKey, torch.Tensor], bucket: Bucket, edges: EdgeList
) -> Iterable[tuple[PartitionKey, _Pairs]]:
    """(neighbor key, pairs) for every relation of ``edges`` that joins a new row to an old one."""
    for rel in torch.unique(edges.rel).tolist():
        lhs_type, rhs_type = shape.relation_sides[rel]
        if lhs_type in shape.featurized or rhs_type in shape.featurized:
            continue
        chosen = edges.rel == rel
        lhs_key, rhs_key = shape.key(lhs_type, bucket.lhs), shape.key(rhs_type, bucket.rhs)
        lhs, rhs = edges.lhs.tensor[chosen], edges.rhs.tensor[chosen]
        for target, rows, other, neighbors in ((lhs_key, lhs, rhs_key, rhs), (rhs_key, rhs, lhs_key, lhs)):
            if target not in new_rows or other not in shape.old_counts:
                continue
            # An old neighbor is a row the init checkpoint holds and trained: within its rows, not new.
            keep = torch.isin(rows, new_rows[target]) & (neighbors < shape.old_counts[other])
            if other in new_rows:
                keep &= ~torch.isin(neighbors, new_rows[other])
            if bool(keep.any()):
                positions = torch.searchsorted(new_rows[target], rows[keep])
                yield other, _Pairs(target, positions, neighbors[keep])


def graph_shape(
    config: ConfigSchema,
    entities: Any,
    init_store: PartitionStore,
    fresh: Mapping[PartitionKey, torch.Tensor] | None = None,
) -> GraphShape:
    """The :class:`GraphShape` of ``config``'s entity files (``entities``: an entity store) and ``init_store``.

    ``fresh``: for an init remapped by name, the rows it holds for entities it never trained.
    """
    topology = build_topology(config)
    keys = [*topology.partitioned_keys(), *topology.unpartitioned_keys()]
    num_dynamic = entities.load_dynamic_relation_count() if config.dynamic_relations else 0
    return GraphShape(
        relation_sides=relation_sides(config, num_dynamic),
        num_partitions={name: entity.num_partitions for name, entity in config.entities.items()},
        counts={key: entities.load_count(*key) for key in keys},
        old_counts=old_row_counts(init_store, init_store.read_version(), keys),
        featurized=frozenset(name for name, entity in config.entities.items() if entity.featurized),
        buckets=topology.buckets(),
        fresh=dict(fresh or {}),
    )


def old_row_counts(store: PartitionStore, version: int, keys: Iterable[PartitionKey]) -> dict[PartitionKey, int]:
    """Rows the checkpoint holds per (type, partition), for the keys it has embeddings of."""
    return {
        key: store.embeddings_shape(key[0], key[1], version)[0]
        for key in keys
        if store.has_embeddings(key[0], key[1], version)
    }


__all__ = ["GraphShape", "NewRows", "graph_shape", "neighbor_means", "old_row_counts"]
