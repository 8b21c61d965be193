"""Pass 1 of the import: names -> ids, occurrence counts, and the spill of every edge's ids.

Per batch, the names of each id column are hashed (lhs and rhs in two threads: numpy releases
the GIL) and looked up in the entity type's :class:`NameIndex`, which gives new names ids in the
order they are first seen: line by line, lhs before rhs (PBG's counting order). Counts are
``numpy.bincount`` of the ids. The batch's ids go to the input's :class:`Spill`.

Which entity type a name belongs to depends on its relation (``config.relations[r].lhs`` /
``.rhs``; in dynamic mode relation 0's types). Edges whose relation is not a config relation
(non-dynamic mode) are spilled with relation -1 and not counted. In dynamic mode every
relation name is counted and every edge's entities too, even if the relation is later dropped
by ``relation_type_min_count`` (PBG counts entities over all inputs).
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pbg_core.types import EntityName
from storage.edge_lists.parse import RawBatch
from storage.errors import LimitExceeded
from storage.importing.names import NameIndex, first_positions
from storage.importing.spill import MAX_ID, SpillChunk


@dataclass(frozen=True)
class ImportPlan:
    """What the passes need from the config, derived once.

    Attributes:
        dynamic: Relation names come from the data (one config relation gives the types).
        relation_ids: Config relation name -> index (non-dynamic mode).
        sides: (lhs type, rhs type) per config relation.
        num_partitions: Partitions per entity type (every type of the config).
        nparts_lhs: Bucket grid rows (most partitions of any relation's lhs type).
        nparts_rhs: Bucket grid columns.
        storage_options: fsspec options (real credentials).
    """

    dynamic: bool
    relation_ids: dict[str, int]
    sides: list[tuple[EntityName, EntityName]]
    num_partitions: dict[EntityName, int]
    nparts_lhs: int
    nparts_rhs: int
    storage_options: Any = None

    @property
    def entity_types(self) -> list[EntityName]:
        """Every entity type, sorted (the order of the seeded shuffles)."""
        return sorted(self.num_partitions)

    def side_types(self, side: int) -> list[EntityName]:
        """The entity type of ``side`` (0 lhs, 1 rhs) per relation index of the spill."""
        sides = self.sides[:1] if self.dynamic else self.sides
        return [pair[side] for pair in sides]


def row_types(plan: ImportPlan, side: int, rel: np.ndarray, known: np.ndarray) -> list[tuple[EntityName, np.ndarray]]:
    """(entity type, row mask) pairs covering the rows of ``known`` relation on ``side``."""
    types = plan.side_types(side)
    if plan.dynamic or len(set(types)) == 1:
        return [(types[0], known)]
    names = sorted(set(types))
    lut = np.array([names.index(t) for t in types], dtype=np.int32)
    of_row = np.where(known, lut[np.maximum(rel, 0)], -1)
    return [(name, of_row == i) for i, name in enumerate(names)]


class NameCounter:
    """Pass-1 state over all inputs: one NameIndex per entity type (+ dynamic relations)."""

    def __init__(self, plan: ImportPlan, threads: ThreadPoolExecutor) -> None:
        self.plan = plan
        self.entities = {name: NameIndex(threads.map) for name in plan.entity_types}
        self.relations = NameIndex()
        self.unknown_relations: Counter[str] = Counter()  # non-dynamic mode: names not in the config

    def snapshot(self) -> dict[str, Any]:
        """State to :meth:`restore` when a file must be read again on the slow path."""
        return {
            "entities": {n: i.snapshot() for n, i in self.entities.items()},
            "relations": self.relations.snapshot(),
            "unknown_relations": Counter(self.unknown_relations),
        }

    def restore(self, snap: dict[str, Any]) -> None:
        """Forget everything counted since ``snap``."""
        for name, index in self.entities.items():
            index.restore(snap["entities"][name])
        self.relations.restore(snap["relations"])
        self.unknown_relations = Counter(snap["unknown_relations"])

    def consume(self, batch: RawBatch, url: str) -> SpillChunk:
        """Count the batch's names and return its edges as ids (the spill chunk); ``batch`` is from ``url``.

        Raises:
            LimitExceeded: an entity type has more distinct names than int32 ids can number.
            ValueError: a batch without its lhs or rhs column (an import's ``Columns`` name both).
        """
        if batch.lhs is None or batch.rhs is None:
            raise ValueError(f"{url}: an import reads both entity columns, got a batch without lhs or rhs")
        n = len(batch)
        rel = self._relation_ids(batch, n)
        known = rel >= 0
        ids = [np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)]
        columns = (batch.lhs, batch.rhs)
        masks = [row_types(self.plan, side, rel, known) for side in (0, 1)]
        for name in self.plan.entity_types:
            todo = [(side, mask) for side in (0, 1) for t, mask in masks[side] if t == name and mask.any()]
            if todo:
                self._count_type(self.entities[name], todo, columns, ids, n)
        for name, index in self.entities.items():
            if index.size > MAX_ID + 1:  # ids are 0..size-1, int32 in the spill files and partition offsets
                raise LimitExceeded(
                    url,
                    f"entity type {name!r} has {index.size:,} distinct names by this input; the importer numbers "
                    f"each entity type's names as int32, so at most {MAX_ID + 1:,} are allowed",
                )
        return SpillChunk(ids[0], ids[1], rel.astype(np.int32), batch.weight)

    def _relation_ids(self, batch: RawBatch, n: int) -> np.ndarray:
        if batch.rel is None:
            return np.zeros(n, dtype=np.int64)
        encoded = pc.dictionary_encode(batch.rel)
        indices = encoded.indices.to_numpy()
        if self.plan.dynamic:
            first = first_positions(indices, len(encoded.dictionary), np.arange(n, dtype=np.int64))
            lut = self.relations.lookup_or_add([(encoded.dictionary, first)])[0]
            self.relations.add_counts(lut, np.bincount(indices, minlength=len(lut)))
        else:
            names = encoded.dictionary.to_pylist()
            lut = np.array([self.plan.relation_ids.get(s, -1) for s in names], dtype=np.int64)
            if (lut < 0).any():
                counts = np.bincount(indices, minlength=len(lut))
                for i in np.flatnonzero(lut < 0).tolist():
                    self.unknown_relations[names[i]] += int(counts[i])
        return lut[indices] if len(lut) else np.zeros(0, dtype=np.int64)

    def _count_type(
        self,
        index: NameIndex,
        todo: list[tuple[int, np.ndarray]],
        columns: tuple[pa.Array, pa.Array],
        ids: list[np.ndarray],
        n: int,
    ) -> None:
        """Map and count the names of one entity type found on the sides/rows of ``todo``."""
        selected = []
        for side, mask in todo:
            whole = bool(mask.all())
            rows = np.arange(n, dtype=np.int64) if whole else np.flatnonzero(mask)
            names = columns[side] if whole else columns[side].filter(pa.array(mask))
            selected.append((side, mask, whole, names, 2 * rows + side))  # line by line, lhs before rhs
        found = index.lookup_or_add([(names, positions) for _, _, _, names, positions in selected])
        index.count(np.concatenate(found))  # one bincount for both sides
        for (side, mask, whole, _, _), part_ids in zip(selected, found, strict=True):
            if whole:
                ids[side] = part_ids
            else:
                ids[side][mask] = part_ids
