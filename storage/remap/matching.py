"""Names of an entity type on both sides of a re-import, joined by name.

A :class:`NameTable` holds every name of one entity type with its (partition, offset), as one
pyarrow string array and two int64 arrays: about 20 bytes per name beside the names' own bytes,
no Python object per name. :func:`match` joins the current table to the old one by name (a hash
join in pyarrow's ``index_in``) and returns where each entity present in both moves. Names are
unique within a type (``pbg import`` writes each once); a duplicate would match its first copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class NameTable:
    """Every name of one entity type with its partition and offset, partition by partition."""

    names: pa.Array
    part: np.ndarray
    offset: np.ndarray
    counts: tuple[int, ...]  # names per partition

    def __len__(self) -> int:
        return len(self.part)


@dataclass(frozen=True)
class Moves:
    """Where each entity present on both sides moves: from (old partition, offset) to (new partition, offset)."""

    old_part: np.ndarray
    old_offset: np.ndarray
    new_part: np.ndarray
    new_offset: np.ndarray


@dataclass(frozen=True)
class Counted:
    """Entities of one type (or relation types) kept, new, and gone, across a re-import."""

    kept: int = 0
    new: int = 0
    dropped: int = 0

    def __add__(self, other: Counted) -> Counted:
        return Counted(self.kept + other.kept, self.new + other.new, self.dropped + other.dropped)

    @property
    def total(self) -> int:
        """Entities now: kept plus new."""
        return self.kept + self.new


def name_table(load: Callable[[int], list[str]], parts: int) -> NameTable:
    """The names of partitions ``0..parts-1``, each read by ``load`` and dropped once converted."""
    chunks, part_ids, offsets, counts = [], [], [], []
    for part in range(parts):
        names = load(part)
        chunks.append(pa.array(names, type=pa.large_string()))
        part_ids.append(np.full(len(names), part, dtype=np.int64))
        offsets.append(np.arange(len(names), dtype=np.int64))
        counts.append(len(names))
    return NameTable(
        names=pa.concat_arrays(chunks) if chunks else pa.array([], type=pa.large_string()),
        part=np.concatenate(part_ids) if part_ids else np.zeros(0, dtype=np.int64),
        offset=np.concatenate(offsets) if offsets else np.zeros(0, dtype=np.int64),
        counts=tuple(counts),
    )


def is_prefix(old: NameTable, new: NameTable) -> bool:
    """Whether every partition of ``new`` starts with ``old``'s names of that partition, in order
    (a graph grown by ``pbg import --append``: positions still hold)."""
    if len(old.counts) != len(new.counts) or any(o > n for o, n in zip(old.counts, new.counts, strict=True)):
        return False
    old_starts, new_starts = _starts(old.counts), _starts(new.counts)
    return all(
        old.names.slice(old_starts[part], count).equals(new.names.slice(new_starts[part], count))
        for part, count in enumerate(old.counts)
    )


def _starts(counts: tuple[int, ...]) -> list[int]:
    """Where each partition's names begin in a table."""
    return [sum(counts[:part]) for part in range(len(counts))]


def match(old: NameTable, new: NameTable) -> tuple[Moves, Counted]:
    """Where each name of ``new`` found in ``old`` was and is, and the counts kept / new / dropped."""
    index = pc.index_in(new.names, value_set=old.names).fill_null(-1).to_numpy(zero_copy_only=False)
    index = np.asarray(index, dtype=np.int64)
    found = np.flatnonzero(index >= 0)
    was = index[found]
    moves = Moves(old.part[was], old.offset[was], new.part[found], new.offset[found])
    kept = len(found)
    return moves, Counted(kept=kept, new=len(new) - kept, dropped=len(old) - len(np.unique(was)))


def match_lists(old: list[str], new: list[str]) -> tuple[np.ndarray, Counted]:
    """For short lists (relation types): each new name's old index (-1: new), and the counts."""
    position = {name: i for i, name in enumerate(old)}
    index = np.array([position.get(name, -1) for name in new], dtype=np.int64)
    kept = int((index >= 0).sum())
    return index, Counted(kept=kept, new=len(new) - kept, dropped=len(set(old)) - len(set(index[index >= 0].tolist())))


__all__ = ["Counted", "Moves", "NameTable", "is_prefix", "match", "match_lists", "name_table"]
