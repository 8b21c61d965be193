"""Known true edges for a filtered ranking, read bucket by bucket as ``pbg eval --filtered`` reads them.

Ranking the entities of partition ``p`` for anchors of partition ``q`` filters the edges of
bucket ``(q, p)`` (ranking tails) or ``(p, q)`` (ranking heads) of every filter edge path,
indexed by :meth:`pbg_core.evaluation.metrics.FilterIndex.build`: the same bucket, the same
index and the same mask as evaluation's, so a filtered rank equals ``pbg eval --filtered``'s.
An entity type with one partition has every entity in partition 0, and ``pbg import`` puts its
edges in partition 0 of its side, whatever the other types of that side have; its buckets are
found the same way. Only the buckets of the partition being ranked are held in memory.

The edges are (partition, offset) ids of the import ``entity_path`` holds now, while the model
names its rows by the names its checkpoint records. :func:`known_edges` therefore refuses a
version whose rows of a ranked type belong to other names than the entity files list now
(:func:`storage.reader_names.check_positions`, as ``pbg eval`` does), and holds a reader file
of ``entity_path`` (:func:`storage.entity_lease.reading`) while the edges are read: no import
rewrites them meanwhile. Nothing is written but that reader file, removed at the end.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pbg_core.edgelist import EdgeList
from pbg_core.evaluation.metrics import FilterIndex
from pbg_core.types import Bucket, EntityName, Partition, Side
from storage import layout
from storage.checkpoints import CheckpointStore
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.entity_lease import command_label, reading
from storage.errors import DataNotFound
from storage.reader_names import check_positions

logger = logging.getLogger(__name__)

READER = "a filtered prediction"  # what would rank by position, in the refusal of moved names


class KnownEdges:
    """The filter edge paths' buckets, indexed one at a time and kept while their partition is ranked.

    Args:
        stores: The filter edge paths.
    """

    def __init__(self, stores: Sequence[EdgeStore]) -> None:
        self.stores = list(stores)
        self._indexes: dict[Bucket, FilterIndex | None] = {}

    def index(self, side: Side, anchor_part: Partition, target_part: Partition) -> FilterIndex | None:
        """The known edges ranking ``side`` in ``target_part`` for anchors of ``anchor_part`` (None: none).

        Raises:
            DataNotFound: a filter path lacks the bucket's file.
        """
        bucket = Bucket(anchor_part, target_part) if side is Side.RHS else Bucket(target_part, anchor_part)
        if bucket not in self._indexes:
            known = [store.load(bucket) for store in self.stores if store.num_edges(bucket) > 0]
            self._indexes[bucket] = FilterIndex.build(EdgeList.cat(known)) if known else None
        return self._indexes[bucket]

    def release(self) -> None:
        """Drop the indexes built so far (the partition they served is done)."""
        self._indexes.clear()


@contextlib.contextmanager
def known_edges(
    config: Any, version: int, filter_paths: Sequence[str], ranked: Mapping[EntityName, int]
) -> Iterator[KnownEdges]:
    """The known edges of ``filter_paths``, while holding a reader file of ``config.entity_path``.

    Args:
        config: The model's config (``ConfigSchema``): checkpoint_path, entity_path,
            dynamic_relations and the storage options are read.
        version: The checkpoint version the model reads.
        filter_paths: Edge paths whose edges are known true.
        ranked: The entity types whose (partition, offset) ids the filter is used with, and
            their partition counts (those of the anchors and of the ranked side).

    Raises:
        NamesChangedError: the version's rows of a type in ``ranked`` (or its relation types)
            belong to other names than the entity files list now (imported again since).
        DataNotFound: a filter path holds no edge files.
        LeaseHeldError: an import is writing ``entity_path``.
    """
    options = config.storage_options_for_fs()
    with reading(config.entity_path, command_label(), options):
        checkpoint = CheckpointStore(config.checkpoint_path, options)
        entities = EntityStore(config.entity_path, options)
        check = check_positions(checkpoint, version, entities, ranked, config.dynamic_relations, READER)
        if check.unchecked:
            logger.warning(
                "checkpoint_path %s version %d has no record of the names its rows belong to for %s: the known "
                "edges are matched to its rows by position",
                config.checkpoint_path,
                version,
                ", ".join(check.unchecked),
            )
        stores = [EdgeStore(path, options) for path in filter_paths]
        for store in stores:
            if not store.list_buckets():
                raise DataNotFound(
                    store.url,
                    f"filter path holds no edge files ({layout.edge_file(0, 0)}, ...); give edge paths "
                    "that pbg import wrote",
                )
        yield KnownEdges(stores)


__all__ = ["READER", "KnownEdges", "known_edges"]
