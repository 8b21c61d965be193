"""HOGWILD-safe Adagrad variants (PBG 1.12).

- :class:`RowAdagrad` updates embedding tables row by row: one accumulator per row,
  ``G_row += mean(g_row^2)``, update ``-lr * g_row / (sqrt(G_row) + 1e-10)``. Duplicate
  rows of a batch are summed first (as a coalesced sparse gradient would be). Contiguous
  float32 tables take the fused loop of :mod:`pbg_core.kernels.fused`; others the torch ops here.
- :class:`AsyncAdagrad` is element-wise Adagrad for model parameters (operators, global
  embeddings) with its accumulators in shared memory.

Both use PBG's "local G" trick: the denominator is computed from the value read plus
this worker's own contribution, not from a re-read of the shared accumulator, so a
racing writer can never make it smaller than this worker's own ``g^2``.

State dicts are plain nested dicts of tensors/ints/floats (``torch.save``-able and
loadable with ``weights_only=True``), in torch.optim's ``{"state", "param_groups"}``
shape so PBG checkpoints' optimizer blobs line up.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from pbg_core.kernels import fused
from pbg_core.types import FloatTensorType, LongTensorType

EPS = 1e-10


def state_to_bytes(state: dict[str, Any]) -> bytes:
    """An optimizer state dict as the bytes stored in ``optimizer/state_dict`` (``torch.save``)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def state_from_bytes(data: bytes) -> dict[str, Any]:
    """Inverse of :func:`state_to_bytes`; plain tensors only (``weights_only=True``)."""
    state: dict[str, Any] = torch.load(io.BytesIO(data), weights_only=True)
    return state


class RowAdagrad:
    """Row-wise Adagrad over (table [count, D], state [count]) pairs.

    Args:
        lr: Learning rate of the embedding tables (config ``lr``).
    """

    def __init__(self, lr: float) -> None:
        self.lr = lr
        # Per table size, scratch for finding duplicate rows in O(n) (see duplicate_positions);
        # never pickled: each worker process grows its own.
        self._slots: dict[int, LongTensorType] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"lr": self.lr}

    def __setstate__(self, data: dict[str, Any]) -> None:
        self.__init__(data["lr"])  # type: ignore[misc]  # unpickling re-runs __init__ on purpose: the state is only lr

    def _slots_for(self, table: FloatTensorType) -> LongTensorType:
        slots = self._slots.get(table.shape[0])
        if slots is None:
            slots = self._slots[table.shape[0]] = torch.empty(table.shape[0], dtype=torch.long)
        return slots

    def step(
        self,
        table: FloatTensorType,
        state: FloatTensorType,
        indices: LongTensorType,
        grads: FloatTensorType,
        grads_writable: bool = False,
    ) -> None:
        """Apply the gradients ``grads`` [n, D] of rows ``indices`` [n] (duplicates allowed) in place.

        Args:
            table: The embedding table [count, D].
            state: Its accumulator [count].
            indices: Row of each gradient; a repeated row gets the sum of its gradients.
            grads: The gradients (left untouched unless ``grads_writable``).
            grads_writable: ``grads`` is scratch the optimizer may overwrite (saves a copy).
        """
        if indices.numel() == 0:
            return
        if not grads_writable:
            grads = grads.clone()
        if fused.accepts((table, state, grads), (indices,)):
            fused.row_adagrad_(table, state, indices, grads, self._slots_for(table), self.lr, EPS)
            return
        # Instead of compacting to unique rows, each duplicate's gradient is added to the
        # first copy and zeroed: a zero-gradient row adds 0 to both state and table.
        fold_duplicate_rows_(indices, grads, self._slots_for(table))
        self._apply(table, state, indices, grads)

    def _apply(
        self, table: FloatTensorType, state: FloatTensorType, indices: LongTensorType, grads: FloatTensorType
    ) -> None:
        """The update for gradients with at most one nonzero copy per row (``grads`` overwritten)."""
        # mean(g^2) per row in one pass, without materialising g^2.
        g2 = torch.linalg.vector_norm(grads, dim=1).square_().div_(grads.shape[1])
        local = state.index_select(0, indices).add_(g2)
        state.index_add_(0, indices, g2)
        scale = local.sqrt_().add_(EPS).reciprocal_().mul_(-self.lr)
        table.index_add_(0, indices, grads.mul_(scale.unsqueeze(1)))

    def step_pieces(
        self,
        table: FloatTensorType,
        state: FloatTensorType,
        indices: list[LongTensorType],
        grads: list[FloatTensorType],
    ) -> None:
        """:meth:`step` for gradients in pieces (overwritten), without concatenating them.

        Equivalent to ``step(table, state, cat(indices), cat(grads))``: duplicates are
        folded across pieces first, so each row has one nonzero gradient overall.
        """
        if len(indices) == 1:
            self.step(table, state, indices[0], grads[0], grads_writable=True)
            return
        src, dst = duplicate_positions(torch.cat(indices), self._slots_for(table))
        if src.numel() > 0:
            starts = [0]
            for idx in indices:
                starts.append(starts[-1] + idx.numel())
            moved = [
                grads[p].index_select(0, src[(src >= lo) & (src < hi)] - lo)
                for p, (lo, hi) in enumerate(zip(starts, starts[1:], strict=False))
            ]
            moved_dst = torch.cat([dst[(src >= lo) & (src < hi)] for lo, hi in zip(starts, starts[1:], strict=False)])
            moved_rows = torch.cat(moved)
            for p, (lo, hi) in enumerate(zip(starts, starts[1:], strict=False)):
                into = (moved_dst >= lo) & (moved_dst < hi)
                grads[p].index_add_(0, moved_dst[into] - lo, moved_rows[into])
                grads[p].index_fill_(0, src[(src >= lo) & (src < hi)] - lo, 0.0)
        for idx, grad in zip(indices, grads, strict=True):
            self._apply(table, state, idx, grad)

    @staticmethod
    def state_dict(state: FloatTensorType, lr: float = 0.0) -> dict[str, Any]:
        """Plain-tensor state of one table, in the shape PBG's trainer loads and resumes from.

        PBG's ``RowAdagrad.load_state_dict`` (torch's) takes the saved param group whole
        and its ``step`` reads ``step`` per parameter, ``lr``, ``lr_decay`` and
        ``weight_decay`` per group: without them ``torchbiggraph_train`` cannot resume
        from our checkpoint (``KeyError: 'step'``).
        """
        return {
            "state": {0: {"sum": state.clone(), "step": 0}},
            "param_groups": [{"params": [0], "lr": lr, "lr_decay": 0, "weight_decay": 0}],
        }

    @staticmethod
    def load_state_dict(data: dict[str, Any], out: FloatTensorType) -> bool:
        """Copy a saved accumulator into ``out``; False when ``data`` holds none of that shape."""
        saved = data.get("state", {}).get(0, {}).get("sum")
        if saved is None or saved.shape != out.shape:
            return False
        out.copy_(saved)
        return True


def fold_duplicate_rows_(indices: LongTensorType, grads: FloatTensorType, slots: LongTensorType | None = None) -> None:
    """Sum the gradients of repeated ``indices`` into one copy of each row; zero the others.

    Afterwards every row index has at most one nonzero gradient, so per-row updates
    computed from ``grads`` equal those of a coalesced (summed) sparse gradient.

    Args:
        indices: Row of each gradient.
        grads: The gradients [n, D], changed in place.
        slots: Optional scratch of more than ``indices.max()`` longs (see :func:`duplicate_positions`).
    """
    src, dst = duplicate_positions(indices, slots)
    if src.numel() > 0:
        grads.index_add_(0, dst, grads.index_select(0, src))
        grads.index_fill_(0, src, 0.0)


def duplicate_positions(
    indices: LongTensorType, slots: LongTensorType | None = None
) -> tuple[LongTensorType, LongTensorType]:
    """Positions ``src`` of repeated values and, for each, the position ``dst`` of its first copy.

    ``src`` is ascending and never contains a kept (first) copy. Runs in O(n) by
    scattering each position to its value's slot with ``amin`` (order-independent,
    so deterministic): ~4x cheaper than sorting a batch's few thousand indices.

    Args:
        indices: Row indices [n].
        slots: Scratch of more than ``indices.max()`` longs; its contents do not matter
            (only the slots of ``indices`` are written, then read). Allocated if None.
    """
    n = indices.numel()
    if n < 2:
        empty = indices.new_empty(0)
        return empty, empty
    if slots is None:
        slots = indices.new_empty(int(indices.max()) + 1)
    positions = _arange(n)
    slots.scatter_reduce_(0, indices, positions, "amin", include_self=False)
    first = slots.index_select(0, indices)
    src = (first != positions).nonzero().squeeze(1)
    if src.numel() == 0:
        return src, src
    return src, first.index_select(0, src)


_ARANGE: list[LongTensorType] = [torch.arange(0)]


def _arange(n: int) -> LongTensorType:
    """``arange(n)`` as a view of a cached, grown-on-demand tensor (never written to)."""
    if _ARANGE[0].numel() < n:
        _ARANGE[0] = torch.arange(max(n, 2 * _ARANGE[0].numel()))
    return _ARANGE[0][:n]


class AsyncAdagrad:
    """Element-wise Adagrad with shared-memory accumulators, for model parameters.

    Args:
        params: Parameters to optimise (order defines the state-dict indices).
        lr: ``relation_lr`` if set, else ``lr``.
    """

    def __init__(self, params: Iterable[nn.Parameter], lr: float) -> None:
        self.params = list(params)
        self.lr = lr
        self.sums = [torch.zeros_like(p, memory_format=torch.contiguous_format) for p in self.params]

    def share_memory_(self) -> AsyncAdagrad:
        """Move the accumulators to shared memory (before starting workers); returns self."""
        for s in self.sums:
            s.share_memory_()
        return self

    @torch.no_grad()
    def step(self) -> None:
        """Update every parameter that has a gradient."""
        for p, acc in zip(self.params, self.sums, strict=True):
            if p.grad is None:
                continue
            g = p.grad
            local = acc + g * g
            acc.addcmul_(g, g)
            p.addcdiv_(g, local.sqrt_().add_(EPS), value=-self.lr)

    def zero_grad(self) -> None:
        """Drop the gradients (set to None)."""
        for p in self.params:
            p.grad = None

    def optimizer_state_dict(self) -> dict[str, Any]:
        """torch.optim-shaped state of plain tensors."""
        # The fields torch.optim.Adagrad keeps, so PBG's trainer can resume from it (see
        # RowAdagrad.state_dict); our loader reads only "sum".
        return {
            "state": {i: {"sum": s.clone(), "step": torch.tensor(0.0)} for i, s in enumerate(self.sums)},
            "param_groups": [
                {
                    "lr": self.lr,
                    "lr_decay": 0,
                    "eps": 1e-10,
                    "weight_decay": 0,
                    "initial_accumulator_value": 0,
                    "foreach": None,
                    "maximize": False,
                    "differentiable": False,
                    "fused": None,
                    "params": list(range(len(self.sums))),
                }
            ],
        }

    def load_optimizer_state_dict(self, data: dict[str, Any], grows: bool = False) -> None:
        """Restore accumulators saved by :meth:`optimizer_state_dict`.

        ``grows``: a saved accumulator may have fewer rows than its parameter now (relation types
        appended since): it fills the first rows, the others stay zero.

        Raises:
            ValueError: the number or shapes of the saved accumulators differ.
        """
        state = data.get("state", {})
        if len(state) != len(self.sums):
            raise ValueError(f"optimizer state has {len(state)} parameters, the model has {len(self.sums)}")
        for i, acc in enumerate(self.sums):
            saved = state[i]["sum"]
            fewer_rows = grows and saved.dim() == acc.dim() >= 1 and saved.shape[1:] == acc.shape[1:]
            if saved.shape != acc.shape and not (fewer_rows and saved.shape[0] < acc.shape[0]):
                raise ValueError(f"optimizer state {i} has shape {tuple(saved.shape)}, expected {tuple(acc.shape)}")
            if saved.shape == acc.shape:
                acc.copy_(saved)
            else:
                acc.zero_()
                acc[: len(saved)].copy_(saved)
