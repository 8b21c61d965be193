"""Edge value types: ragged feature lists, entity lists and edge lists.

Invariants:
- ``TensorList.offsets`` has ``N + 1`` int64 entries, starts at 0 and is non-decreasing;
  item ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (featurized entities, PBG 1.15).
- ``EntityList.tensor`` holds one int64 offset per entity; for featurized entities the
  ``tensor_list`` holds the feature bag and the plain offset is ignored.
- ``EdgeList`` holds ``lhs``/``rhs`` entity lists, one int64 relation per edge and an
  optional float32 weight per edge, all of the same length.

Indexing by a ``slice`` or a LongTensor returns a new value of the same type; ``cat``
concatenates; ``share_memory_`` moves every tensor to shared memory (HOGWILD workers).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pbg_core.errors import ShapeError
from pbg_core.types import FloatTensorType, LongTensorType

Index = slice | int | torch.Tensor


def _as_index_tensor(index: Index, length: int) -> torch.Tensor | slice:
    """Normalise ``index`` to a contiguous step-1 slice or a LongTensor."""
    if isinstance(index, int):
        index = slice(index, index + 1) if index != -1 else slice(index, None)
    if isinstance(index, slice):
        start, stop, step = index.indices(length)
        if step == 1:
            return slice(start, max(start, stop))
        return torch.arange(start, stop, step, dtype=torch.long)
    if not isinstance(index, torch.Tensor):
        raise TypeError(f"cannot index by {type(index).__name__}; allowed: slice, int, LongTensor")
    if index.dtype == torch.bool:
        return index.nonzero().flatten()
    return index.long()


class TensorList:
    """A ragged list of int64 lists stored as ``offsets`` [N+1] and ``data`` [M].

    Args:
        offsets: LongTensor[N+1] of boundaries into ``data``.
        data: LongTensor[M] holding every list back to back.
    """

    def __init__(self, offsets: LongTensorType, data: LongTensorType) -> None:
        if offsets.dim() != 1 or offsets.numel() < 1:
            raise ShapeError(f"TensorList offsets must be 1-D with N+1 >= 1 entries, got shape {tuple(offsets.shape)}")
        if data.dim() != 1:
            raise ShapeError(f"TensorList data must be 1-D, got shape {tuple(data.shape)}")
        self.offsets = offsets.long()
        self.data = data.long()

    @classmethod
    def empty(cls, num_items: int = 0) -> TensorList:
        """``num_items`` empty lists."""
        return cls(torch.zeros(num_items + 1, dtype=torch.long), torch.empty(0, dtype=torch.long))

    def __len__(self) -> int:
        return self.offsets.numel() - 1

    def lengths(self) -> LongTensorType:
        """Length of every list, LongTensor[N]."""
        return self.offsets[1:] - self.offsets[:-1]

    def __getitem__(self, index: Index) -> TensorList:
        idx = _as_index_tensor(index, len(self))
        if isinstance(idx, slice):
            offsets = self.offsets[idx.start : idx.stop + 1]
            data = self.data[int(offsets[0]) : int(offsets[-1])]
            return TensorList(offsets - offsets[0], data)
        starts = self.offsets[idx]
        lengths = self.offsets[idx + 1] - starts
        new_offsets = torch.zeros(idx.numel() + 1, dtype=torch.long)
        torch.cumsum(lengths, 0, out=new_offsets[1:])
        total = int(new_offsets[-1])
        # Position of every output element inside its own list, plus its list's start.
        within = torch.arange(total, dtype=torch.long) - torch.repeat_interleave(new_offsets[:-1], lengths)
        data = self.data[torch.repeat_interleave(starts, lengths) + within]
        return TensorList(new_offsets, data)

    @staticmethod
    def cat(items: Sequence[TensorList]) -> TensorList:
        """Concatenate lists of lists (offsets are shifted)."""
        if not items:
            return TensorList.empty()
        shifts = [0]
        for item in items[:-1]:
            shifts.append(shifts[-1] + int(item.offsets[-1]))
        offsets = [items[0].offsets[:1] * 0] + [
            it.offsets[1:] - it.offsets[0] + s for it, s in zip(items, shifts, strict=True)
        ]
        datas = [it.data[int(it.offsets[0]) : int(it.offsets[-1])] for it in items]
        return TensorList(torch.cat(offsets), torch.cat(datas))

    def share_memory_(self) -> TensorList:
        """Move both tensors to shared memory; returns self."""
        self.offsets.share_memory_()
        self.data.share_memory_()
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorList):
            return NotImplemented
        return torch.equal(self.offsets, other.offsets) and torch.equal(self.data, other.data)

    def __repr__(self) -> str:
        return f"TensorList(len={len(self)}, total={self.data.numel()})"


class EntityList:
    """Entities of one side of a set of edges: plain offsets and, if featurized, bags.

    Args:
        tensor: LongTensor[N] of entity offsets.
        tensor_list: Optional feature bags, one per entity (length N).
    """

    def __init__(self, tensor: LongTensorType, tensor_list: TensorList | None = None) -> None:
        if tensor.dim() != 1:
            raise ShapeError(f"EntityList tensor must be 1-D, got shape {tuple(tensor.shape)}")
        if tensor_list is not None and len(tensor_list) != tensor.numel():
            raise ShapeError(f"EntityList tensor has {tensor.numel()} entries but tensor_list has {len(tensor_list)}")
        self.tensor = tensor.long()
        self.tensor_list = tensor_list

    @classmethod
    def from_tensor(cls, tensor: LongTensorType) -> EntityList:
        """Plain (non-featurized) entities."""
        return cls(tensor)

    @property
    def has_tensor_list(self) -> bool:
        """Whether feature bags are attached."""
        return self.tensor_list is not None

    def __len__(self) -> int:
        return self.tensor.numel()

    def __getitem__(self, index: Index) -> EntityList:
        idx = _as_index_tensor(index, len(self))
        sub_list = self.tensor_list[idx] if self.tensor_list is not None else None
        return EntityList(self.tensor[idx], sub_list)

    @staticmethod
    def cat(items: Sequence[EntityList]) -> EntityList:
        """Concatenate; feature bags are kept only if every part has them."""
        tensor = torch.cat([it.tensor for it in items]) if items else torch.empty(0, dtype=torch.long)
        if items and all(it.tensor_list is not None for it in items):
            return EntityList(tensor, TensorList.cat([it.tensor_list for it in items]))  # type: ignore[misc]  # every tensor_list is not None (checked just above); mypy cannot carry the all() narrowing
        if any(it.tensor_list is not None for it in items):
            raise ShapeError("cannot concatenate featurized and plain EntityLists")
        return EntityList(tensor)

    def share_memory_(self) -> EntityList:
        """Move tensors to shared memory; returns self."""
        self.tensor.share_memory_()
        if self.tensor_list is not None:
            self.tensor_list.share_memory_()
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EntityList):
            return NotImplemented
        return torch.equal(self.tensor, other.tensor) and self.tensor_list == other.tensor_list

    def __repr__(self) -> str:
        return f"EntityList(len={len(self)}, featurized={self.has_tensor_list})"


class EdgeList:
    """A set of edges: ``lhs``, ``rhs`` entities, relation per edge, optional float32 weight.

    Args:
        lhs: Left-hand entities (length N).
        rhs: Right-hand entities (length N).
        rel: LongTensor[N] relation index per edge.
        weight: Optional FloatTensor[N]; stored as float32.
    """

    def __init__(
        self, lhs: EntityList, rhs: EntityList, rel: LongTensorType, weight: FloatTensorType | None = None
    ) -> None:
        n = len(lhs)
        if len(rhs) != n or rel.dim() != 1 or rel.numel() != n:
            raise ShapeError(f"EdgeList parts differ in length: lhs {n}, rhs {len(rhs)}, rel shape {tuple(rel.shape)}")
        if weight is not None and (weight.dim() != 1 or weight.numel() != n):
            raise ShapeError(f"EdgeList weight must have shape ({n},), got {tuple(weight.shape)}")
        self.lhs = lhs
        self.rhs = rhs
        self.rel = rel.long()
        self.weight = weight.float() if weight is not None else None

    @classmethod
    def from_tensors(
        cls,
        lhs: LongTensorType,
        rhs: LongTensorType,
        rel: LongTensorType | int,
        weight: FloatTensorType | None = None,
    ) -> EdgeList:
        """Plain edges from offset tensors; a scalar ``rel`` is broadcast to every edge."""
        if not isinstance(rel, torch.Tensor) or rel.dim() == 0:
            rel = torch.full((lhs.numel(),), int(rel), dtype=torch.long)
        return cls(EntityList(lhs), EntityList(rhs), rel, weight)

    @property
    def has_weight(self) -> bool:
        """Whether per-edge weights are present."""
        return self.weight is not None

    def __len__(self) -> int:
        return self.rel.numel()

    def __getitem__(self, index: Index) -> EdgeList:
        idx = _as_index_tensor(index, len(self))
        weight = self.weight[idx] if self.weight is not None else None
        return EdgeList(self.lhs[idx], self.rhs[idx], self.rel[idx], weight)

    @staticmethod
    def cat(items: Sequence[EdgeList]) -> EdgeList:
        """Concatenate; weights are kept if any part has them (missing ones count as 1.0)."""
        if not items:
            return EdgeList.from_tensors(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), 0)
        weight = None
        if any(it.weight is not None for it in items):
            weight = torch.cat([it.weight if it.weight is not None else torch.ones(len(it)) for it in items])
        return EdgeList(
            EntityList.cat([it.lhs for it in items]),
            EntityList.cat([it.rhs for it in items]),
            torch.cat([it.rel for it in items]),
            weight,
        )

    def share_memory_(self) -> EdgeList:
        """Move every tensor to shared memory; returns self."""
        self.lhs.share_memory_()
        self.rhs.share_memory_()
        self.rel.share_memory_()
        if self.weight is not None:
            self.weight.share_memory_()
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EdgeList):
            return NotImplemented
        same_weight = (self.weight is None and other.weight is None) or (
            self.weight is not None and other.weight is not None and torch.equal(self.weight, other.weight)
        )
        return self.lhs == other.lhs and self.rhs == other.rhs and torch.equal(self.rel, other.rel) and same_weight

    def __repr__(self) -> str:
        return f"EdgeList(len={len(self)}, weighted={self.has_weight})"
