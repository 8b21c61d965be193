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


def extend(old_sizes: list[int], counts: np.ndarray, min_count: int, rng: np.random.Generator) -> Assignment:
    """An appending import's ids: the first ``sum(old_sizes)`` ids keep their (partition, offset),
    the new ones seen ``min_count`` times or more are shuffled and added at partitions' ends.

    Ids ``0 .. sum(old_sizes) - 1`` are the already imported names, partition after partition in
    offset order; they are kept whatever their count (their rows are trained). The new names
    fill the smallest partitions first (:func:`fill_counts`), so the sizes end as even as the
    old ones allow, and within a partition they follow the shuffle.

    Args:
        old_sizes: Names per partition already imported (``P`` entries).
        counts: Occurrences by id in the new inputs (old ids first).
        min_count: Keep new ids with ``counts >= min_count``.
        rng: Draws exactly one permutation of the kept new ids.
    """
    num_old = sum(old_sizes)
    new = np.flatnonzero(counts[num_old:] >= min_count) + num_old
    new = new[rng.permutation(len(new))]
    added = fill_counts(old_sizes, len(new))
    old_starts = partition_starts_of(old_sizes)
    new_starts = partition_starts_of(added)
    pieces = []
    for part in range(len(old_sizes)):
        pieces.append(np.arange(old_starts[part], old_starts[part + 1], dtype=np.int64))
        pieces.append(new[new_starts[part] : new_starts[part + 1]].astype(np.int64))
    order = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    sizes = [old + more for old, more in zip(old_sizes, added, strict=True)]
    starts = partition_starts_of(sizes)
    parts = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    part_of = np.full(len(counts), -1, dtype=np.int16 if len(sizes) < 2**15 else np.int32)
    offset_of = np.zeros(len(counts), dtype=np.int32)
    part_of[order] = parts
    offset_of[order] = np.arange(len(order), dtype=np.int64) - np.asarray(starts, dtype=np.int64)[parts]
    return Assignment(order, starts, part_of, offset_of)


def fill_counts(sizes: list[int], extra: int) -> list[int]:
    """How many of ``extra`` new names each partition gets so the smallest fill first (water level).

    The result sums to ``extra``; afterwards no partition that received names is more than one
    above another partition (a remainder goes to the originally smallest ones, then the lower index).
    """
    added = [0] * len(sizes)
    if not sizes or extra <= 0:
        return added
    order = sorted(range(len(sizes)), key=lambda p: (sizes[p], p))
    left, level, count = extra, sizes[order[0]], 0
    while count < len(order) and left > 0:
        count += 1  # raise the lowest `count` partitions together up to the next one's size
        ceiling = sizes[order[count]] if count < len(order) else None
        room = (ceiling - level) * count if ceiling is not None else left
        step = min(room, left)
        level_raise, remainder = divmod(step, count)
        for rank in range(count):
            added[order[rank]] += level_raise + (1 if rank < remainder else 0)
        left -= step
        level += level_raise
        if remainder:
            break  # the remainder never happens before the last step: room is a multiple of count
    return added


def partition_starts_of(sizes: list[int]) -> list[int]:
    """Cumulative starts of partitions of the given sizes (``len(sizes) + 1`` entries)."""
    return [0, *np.cumsum(sizes, dtype=np.int64).tolist()] if sizes else [0]


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
