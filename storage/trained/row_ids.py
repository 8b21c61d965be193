"""Which entity of a type: by (partition, offset), or by its global id; and the one from the other.

An entity of a checkpoint's type is row ``offset`` of partition ``partition`` (:class:`RowIds`).
Its *global id* is its position over all the type's partitions in partition order: the row a
similarity index gives it, and the position of its name in the type's list of names.
:class:`GlobalIds` turns one into the other, from the type's entities per partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pbg_core.types import LongTensorType


@dataclass(frozen=True)
class RowIds:
    """Entities of one type by (partition, offset); the two tensors have one shape.

    Attributes:
        partitions: int64, each entity's partition (-1: none, in a result's empty slot).
        offsets: int64, its offset in that partition (-1: none).
    """

    partitions: LongTensorType
    offsets: LongTensorType

    def __len__(self) -> int:
        """Number of entities (of the first dimension)."""
        return int(self.partitions.shape[0])

    @classmethod
    def of(cls, partitions: np.ndarray, offsets: np.ndarray) -> RowIds:
        """From int arrays (a name index's lookups)."""
        return cls(torch.from_numpy(np.asarray(partitions, np.int64)), torch.from_numpy(np.asarray(offsets, np.int64)))


class GlobalIds:
    """Global ids <-> (partition, offset) of a type with ``counts[p]`` entities in partition ``p``."""

    def __init__(self, counts: Sequence[int]) -> None:
        self.counts = [int(count) for count in counts]
        self.starts = torch.tensor([0, *np.cumsum(self.counts)[:-1].tolist()], dtype=torch.int64)

    @property
    def count(self) -> int:
        """Entities over all partitions."""
        return sum(self.counts)

    def global_ids(self, ids: RowIds) -> LongTensorType:
        """Each entity's position over all partitions (-1 where ``ids`` has none)."""
        valid = ids.partitions >= 0
        found = self.starts[ids.partitions.clamp_min(0)] + ids.offsets
        return torch.where(valid, found, torch.full_like(found, -1))

    def row_ids(self, global_ids: LongTensorType) -> RowIds:
        """(partition, offset) of each global id (-1 for a negative id, faiss's empty slot)."""
        valid = global_ids >= 0
        parts = torch.searchsorted(self.starts, global_ids.clamp_min(0), right=True) - 1
        offsets = global_ids - self.starts[parts]
        none = torch.full_like(global_ids, -1)
        return RowIds(torch.where(valid, parts, none), torch.where(valid, offsets, none))


__all__ = ["GlobalIds", "RowIds"]
