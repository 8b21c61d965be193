"""Fetching rows of the shared embedding tables for one batch, and writing updates back.

The generic training path (:mod:`pbg_core.training.batching`) registers every row request of a
batch, fetches each into its own dense leaf, and after ``backward`` hands the coalesced
gradients to :class:`~pbg_core.training.optimizers.RowAdagrad`. ``max_norm`` (PBG's
``F.embedding(max_norm=...)``, :mod:`pbg_core.model.max_norm`) is applied at fetch time, in the
table too.
"""

from __future__ import annotations

import torch

from pbg_core.edgelist import EntityList
from pbg_core.model.max_norm import renormed_rows
from pbg_core.training.optimizers import RowAdagrad
from pbg_core.training.tables import BucketTables
from pbg_core.types import FloatTensorType, LongTensorType, SideKey


class RowGather:
    """Row requests per shared table, each fetched into its own dense leaf.

    One leaf per request (not slices of one big leaf): slicing a leaf makes autograd
    allocate a zero gradient of the whole leaf per slice, which dominated a batch.
    Requests on the same table (same storage) are updated together, so duplicate
    rows across sides and negatives are coalesced by the optimizer.
    """

    def __init__(self, tables: BucketTables, max_norm: float | None, requires_grad: bool) -> None:
        self.tables, self.max_norm, self.requires_grad = tables, max_norm, requires_grad
        self.requests: list[tuple[SideKey, LongTensorType]] = []
        self.leaves: list[FloatTensorType] = []

    def add(self, key: SideKey, idx: LongTensorType) -> int:
        """Register the rows ``idx`` of table ``key``; returns a handle for :meth:`get`."""
        self.requests.append((key, idx))
        return len(self.requests) - 1

    def fetch(self) -> None:
        """Gather every registered request (renorming rows above ``max_norm``; settled without gradient)."""
        for key, idx in self.requests:
            rows = renormed_rows(self.tables.embeddings[key], idx, self.max_norm, settle=not self.requires_grad)
            self.leaves.append(rows.requires_grad_(self.requires_grad))

    def get(self, handle: int) -> FloatTensorType:
        """The fetched rows of one request."""
        return self.leaves[handle]

    def apply(self, optimizer: RowAdagrad) -> None:
        """Hand the leaves' gradients to ``optimizer``, one step per table storage."""
        groups: dict[int, tuple[SideKey, list[LongTensorType], list[FloatTensorType]]] = {}
        for (key, idx), leaf in zip(self.requests, self.leaves, strict=True):
            if leaf.grad is None:
                continue
            _, idxs, grads = groups.setdefault(self.tables.embeddings[key].data_ptr(), (key, [], []))
            idxs.append(idx)
            grads.append(leaf.grad)
        for key, idxs, grads in groups.values():
            # The leaves' gradients are ours to overwrite, and need no concatenation.
            optimizer.step_pieces(self.tables.embeddings[key], self.tables.optim_state[key], idxs, grads)


def bag_mean(rows: FloatTensorType, entities: EntityList) -> FloatTensorType:
    """Mean of each entity's feature rows (an empty bag gives zeros, as embedding_bag)."""
    lengths = entities.tensor_list.lengths()  # type: ignore[union-attr]  # bag_mean is only called for featurized entities, which carry a tensor_list
    segment = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    sums = rows.new_zeros(lengths.numel(), rows.shape[1]).index_add(0, segment, rows)
    return sums / lengths.clamp_min(1).unsqueeze(1).to(rows.dtype)
