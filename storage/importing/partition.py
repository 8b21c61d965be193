"""Between the passes: drop rare names, shuffle with the seed, split into partitions.

The kept names of a type with ``P`` partitions and ``N`` names, in shuffled order, are split
into contiguous ranges: partition ``p`` starts at ``ceil(p*N/P)`` and name ``i`` belongs to
partition ``floor(i*P/N)``. PBG evaluates the same formulas in floating point, which can
round the wrong way (e.g. N=11, P=55) and trip its own assertion; we use exact integers.

The shuffle permutes the kept names in first-seen order with one numpy ``Generator``
(relations first in dynamic mode, then entity types in sorted order), like the old importer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pbg_core.types import Partition


def partition_starts(size: int, num_partitions: int) -> list[int]:
    """Exact ``ceil(p * size / P)`` for p = 0..P (the last one is ``size``)."""
    return [-(-p * size // num_partitions) for p in range(num_partitions + 1)]


@dataclass(frozen=True)
class Assignment:
    """Where every id of one entity type (or relation) ends up.

    Attributes:
        order: The kept ids in final order (position i = partition part(i), offset i - start).
        starts: Partition starts (``num_partitions + 1`` entries).
        part_of: Partition by id, -1 for a dropped id (int16 below 2**15 partitions, else int32).
        offset_of: Offset inside its partition by id (int32; meaningless where dropped).

    Both are as small as they can be: pass 2 gathers from them for every edge, and smaller
    tables miss the caches less.
    """

    order: np.ndarray
    starts: list[int]
    part_of: np.ndarray
    offset_of: np.ndarray

    @property
    def num_partitions(self) -> int:
        return len(self.starts) - 1

    def part_ids(self, part: Partition) -> np.ndarray:
        """Ids of ``part`` ordered by offset."""
        return self.order[self.starts[part] : self.starts[part + 1]]


def assign(counts: np.ndarray, min_count: int, num_partitions: int, rng: np.random.Generator) -> Assignment:
    """Keep ids seen ``min_count`` times or more, shuffle them with ``rng``, split into partitions.

    Args:
        counts: Occurrences by id (ids in first-seen order).
        min_count: Keep ids with ``counts >= min_count``.
        num_partitions: ``P`` >= 1.
        rng: Draws exactly one permutation of the kept ids.
    """
    kept = np.flatnonzero(counts >= min_count)
    order = kept[rng.permutation(len(kept))]
    size = len(order)
    starts = partition_starts(size, num_partitions)
    position = np.arange(size, dtype=np.int64)
    parts = position * num_partitions // max(size, 1)
    part_of = np.full(len(counts), -1, dtype=np.int16 if num_partitions < 2**15 else np.int32)
    offset_of = np.zeros(len(counts), dtype=np.int32)  # ids, hence offsets, are below 2**31
    part_of[order] = parts
    offset_of[order] = position - np.asarray(starts, dtype=np.int64)[parts]
    return Assignment(order, starts, part_of, offset_of)


class EntityIndex:
    """The shuffled names of one entity type, split into contiguous partitions (PBG's Dictionary).

    A small, dict-based view of the same arithmetic as :func:`assign` (used by tests and tools).

    Args:
        names: Names in their final (shuffled) order.
        num_partitions: ``P`` >= 1.
    """

    def __init__(self, names: list[str], num_partitions: int) -> None:
        self.names = names
        self.num_partitions = num_partitions
        self._index = {name: i for i, name in enumerate(names)}
        self._starts = partition_starts(len(names), num_partitions)

    def locate(self, name: str) -> tuple[Partition, int] | None:
        """(partition, offset) of ``name``, or None if unknown."""
        i = self._index.get(name)
        if i is None:
            return None
        part = i * self.num_partitions // len(self.names)
        return part, i - self._starts[part]

    def part_names(self, part: Partition) -> list[str]:
        """Names of ``part`` ordered by offset."""
        return self.names[self._starts[part] : self._starts[part + 1]]
