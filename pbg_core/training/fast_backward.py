"""Rows and backward of :mod:`pbg_core.training.fast_paths`: dense ``bmm``, or sparse pairs.

The embedding gradients of a batch are ``dL = Mr [R; Ur]`` and ``dR = Ml [L; Ul]``
(plus the uniforms' ``Gl_u^T R``, ``Gr_u^T L``), where ``M`` are the score gradients
``[C, B, B + U]``. :func:`dense_backward` computes them with four ``bmm`` into the
contiguous gradient buffers of :class:`BatchRows` (then :meth:`BatchRows.step`).

With the ranking loss only violating ``(positive, negative)`` pairs have a nonzero score
gradient, and once training has converged a little they are a few percent of all pairs
or fewer. Then :func:`ranking_pairs` lists the nonzero entries as ``(lhs row, rhs row,
value)`` triples (the positives' own scores included) and
:meth:`BatchRows.step_pairs` accumulates ``value * other row`` into only the rows that
get a gradient, with ``index_add`` (O(nnz x D) instead of O(C x B x N x D)), and hands
just those rows to RowAdagrad. A row outside every pair has a zero gradient, for which
RowAdagrad changes neither table nor state, so skipping it changes nothing. The order
of the triples is row-major (``nonzero``), so results are deterministic.
"""

from __future__ import annotations

import functools

import torch

from pbg_core.model.max_norm import renormed_rows
from pbg_core.training.optimizers import RowAdagrad
from pbg_core.training.tables import BucketTables
from pbg_core.training.workspace import scratch
from pbg_core.types import FloatTensorType, LongTensorType, SideKey

# Use the sparse backward when at most this fraction of the score gradients are nonzero.
# Measured single-threaded at config A sizes (C=20, B=50, U=50, D=100): with random
# nonzeros the sparse backward + RowAdagrad breaks even with the dense one near 1%;
# on bench/micro_train_step.py's second pass, thresholds 0.5/1/2/4% gave 306-325k,
# 326-331k, 325-328k, 294-319k edges/s (CPU time), so 1.5%.
SPARSE_MAX_DENSITY = 0.015
_COS_EPS = 1e-30  # CosComparator's clamp of the norm

Pairs = tuple[LongTensorType, LongTensorType, FloatTensorType]


class SideRows:
    """Both sides' rows of ``idx`` gathered into reused buffers, and gradient buffers alike.

    When the sides share a table it is one ``index_select`` into one block (:attr:`all_rows`,
    of :attr:`all_idx`; :attr:`grad_blocks` is then its one gradient block); otherwise one
    per side. :attr:`rows` and :attr:`grads` are per side, flat, views of those blocks.

    Args:
        tables: The shared tables.
        keys: (LHS key, RHS key) of the tables.
        idx: Rows to gather, per side.
        max_norm: Applied as the generic path does.
        prefix: Names the scratch buffers (see :func:`scratch`).
    """

    def __init__(
        self,
        tables: BucketTables,
        keys: tuple[SideKey, SideKey],
        idx: list[LongTensorType],
        max_norm: float | None,
        prefix: str,
    ) -> None:
        lhs_table, rhs_table = (tables.embeddings[k] for k in keys)
        self.shared = lhs_table.data_ptr() == rhs_table.data_ptr() and lhs_table.shape == rhs_table.shape
        self.all_idx: LongTensorType | None = None
        self.all_rows: FloatTensorType | None = None
        if self.shared:
            sizes = [i.numel() for i in idx]
            self.all_idx = torch.cat(idx)
            out = scratch(f"{prefix}rows0", (self.all_idx.numel(), lhs_table.shape[1]), lhs_table.dtype)
            self.all_rows = renormed_rows(lhs_table, self.all_idx, max_norm, out)
            self.rows = list(self.all_rows.split(sizes))
            self.grad_blocks = [scratch(f"{prefix}grads0", self.all_rows.shape, lhs_table.dtype)]
            self.grads = list(self.grad_blocks[0].split(sizes))
        else:
            self.rows = [
                renormed_rows(t, i, max_norm, scratch(f"{prefix}rows{s}", (i.numel(), t.shape[1]), t.dtype))
                for s, (t, i) in enumerate(zip((lhs_table, rhs_table), idx, strict=True))
            ]
            self.grad_blocks = [scratch(f"{prefix}grads{s}", r.shape, r.dtype) for s, r in enumerate(self.rows)]
            self.grads = self.grad_blocks


class BatchRows:
    """The rows a batch reads from the shared tables, and the gradient buffers they get.

    Rows are gathered per side laid out per chunk, ``[chunk positives, chunk uniforms]``,
    so :attr:`embs` ``[C, B + U, D]`` are views; one ``index_select`` when both sides
    share a table. Dense gradients go to contiguous blocks ``[positives; uniforms]``
    per side (so ``bmm`` can write them in place), with their own index order.
    """

    def __init__(
        self,
        tables: BucketTables,
        keys: tuple[SideKey, SideKey],
        positives: tuple[LongTensorType, LongTensorType],
        uniforms: list[LongTensorType | None],
        chunk: int,
        max_norm: float | None,
    ) -> None:
        self.tables, self.keys = tables, keys
        gather_idx, grad_idx = [], []
        for pos, uni in zip(positives, uniforms, strict=True):
            if uni is None:
                gather_idx.append(pos)
                grad_idx.append(pos)
            else:
                gather_idx.append(torch.cat([pos.reshape(uni.shape[0], chunk), uni], dim=1).flatten())
                grad_idx.append(torch.cat([pos, uni.flatten()]))
        self.gather_idx = gather_idx
        num_chunks = positives[0].numel() // chunk
        gathered = SideRows(tables, keys, gather_idx, max_norm, "")
        self.shared, self.all_idx, self.all_rows = gathered.shared, gathered.all_idx, gathered.all_rows
        self.flat, self.grad_bufs, grad_flat = gathered.rows, gathered.grad_blocks, gathered.grads
        self.grad_idx = [torch.cat(grad_idx)] if self.shared else grad_idx
        self.embs = [x.view(num_chunks, -1, x.shape[1]) for x in self.flat]
        self.grads: list[tuple[FloatTensorType, FloatTensorType | None]] = []
        for g, uni in zip(grad_flat, uniforms, strict=True):
            parts = g.split([num_chunks * chunk, g.shape[0] - num_chunks * chunk])
            uni_grad = parts[1].view(num_chunks, -1, g.shape[1]) if uni is not None else None
            self.grads.append((parts[0].view(num_chunks, chunk, g.shape[1]), uni_grad))
        self.inv_norms: list[FloatTensorType] | None = None
        self.clamped: list[torch.Tensor] = []

    def normalize(self) -> None:
        """Apply ``CosComparator.prepare`` to the rows in place (undone in the steps)."""
        norms = [e.norm(2, dim=-1, keepdim=True) for e in self.embs]
        self.clamped = [n < _COS_EPS for n in norms]
        self.inv_norms = [n.clamp_min_(_COS_EPS).reciprocal_() for n in norms]
        for e, inv in zip(self.embs, self.inv_norms, strict=True):
            e.mul_(inv)

    def step(self, optimizer: RowAdagrad) -> None:
        """Map the dense gradients back through ``prepare`` and apply RowAdagrad per table."""
        if self.inv_norms is not None:
            for emb, inv, clamped, (grad_pos, grad_uni) in zip(
                self.embs, self.inv_norms, self.clamped, self.grads, strict=True
            ):
                b = grad_pos.shape[1]
                _cos_backward_(emb[:, :b], grad_pos, inv[:, :b], clamped[:, :b])
                if grad_uni is not None:
                    _cos_backward_(emb[:, b:], grad_uni, inv[:, b:], clamped[:, b:])
        keys = self.keys[:1] if self.shared else self.keys  # a shared table: one block, one step
        for key, idx, grad in zip(keys, self.grad_idx, self.grad_bufs, strict=True):
            optimizer.step(self.tables.embeddings[key], self.tables.optim_state[key], idx, grad, grads_writable=True)

    def step_pairs(self, optimizer: RowAdagrad, pairs: Pairs) -> None:
        """Apply the gradient of ``sum value * <L[a], R[b]>`` over ``pairs`` with RowAdagrad.

        Args:
            optimizer: The row optimizer.
            pairs: ``(a, b, value)``: rows of the flat LHS / RHS rows (chunk layout) and
                the score gradient of their pair.
        """
        lhs_rows, rhs_rows, values = pairs
        # The LHS row gets value * R[b], the RHS row value * L[a].
        if self.shared:  # both sides' rows are one gathered block: one gather, one accumulation
            rhs_rows = rhs_rows + self.flat[0].shape[0]
            assert self.all_rows is not None and self.all_idx is not None  # set together with self.shared
            src = self.all_rows.index_select(0, torch.cat([rhs_rows, lhs_rows]))
            src.mul_(values.repeat(2).unsqueeze(1))
            groups: list[tuple[int, LongTensorType, FloatTensorType, FloatTensorType, LongTensorType, int | None]] = [
                (0, torch.cat([lhs_rows, rhs_rows]), src, self.all_rows, self.all_idx, None)
            ]
        else:
            col = values.unsqueeze(1)
            groups = [
                (0, lhs_rows, self.flat[1].index_select(0, rhs_rows).mul_(col), self.flat[0], self.gather_idx[0], 0),
                (1, rhs_rows, self.flat[0].index_select(0, lhs_rows).mul_(col), self.flat[1], self.gather_idx[1], 1),
            ]
        for side, targets, src, units, table_idx, only in groups:
            rows, grads = _accumulate(targets, src)
            if self.inv_norms is not None:
                _cos_backward_(units.index_select(0, rows), grads, *self._flat_norms(only, rows))
            key = self.keys[side]
            table, state = self.tables.embeddings[key], self.tables.optim_state[key]
            optimizer.step(table, state, table_idx.index_select(0, rows), grads, grads_writable=True)

    def _flat_norms(self, side: int | None, rows: LongTensorType) -> tuple[FloatTensorType, torch.Tensor]:
        """``(inverse norms, clamped)`` of flat ``rows`` of one side, or of both sides' block."""
        assert self.inv_norms is not None
        sides = [0, 1] if side is None else [side]
        inv, clamped = (torch.cat([x[s].flatten(0, 1) for s in sides]) for x in (self.inv_norms, self.clamped))
        return inv.index_select(0, rows), clamped.index_select(0, rows)


def _accumulate(targets: LongTensorType, src: FloatTensorType) -> tuple[LongTensorType, FloatTensorType]:
    """Sum the ``src`` rows per target: ``(sorted distinct targets, their summed gradients)``."""
    rows, slot = torch.unique(targets, return_inverse=True)
    return rows, src.new_zeros(rows.numel(), src.shape[1]).index_add_(0, slot, src)


def _cos_backward_(
    unit: FloatTensorType, grad: FloatTensorType, inv_norm: FloatTensorType, clamped: torch.Tensor
) -> None:
    """Turn ``grad`` (w.r.t. ``x / max(|x|, eps)``, whose value is ``unit``) into the gradient w.r.t. ``x``.

    Where the norm was clamped the factor is a constant, so only ``inv_norm * grad`` remains.
    """
    radial = (unit * grad).sum(-1, keepdim=True)
    radial.masked_fill_(clamped, 0.0)
    grad.sub_(unit * radial).mul_(inv_norm)


def dense_backward(
    rows: BatchRows,
    grad_lhs_neg: FloatTensorType | None,
    grad_rhs_neg: FloatTensorType | None,
    grad_pos: FloatTensorType,
) -> None:
    """Write the embedding gradients into ``rows.grads`` with ``bmm`` (score gradients overwritten).

    Args:
        rows: The batch's rows.
        grad_lhs_neg: [C, B, B + Ul] gradient of the LHS negatives' scores, or None.
        grad_rhs_neg: [C, B, B + Ur] gradient of the RHS negatives' scores, or None.
        grad_pos: [C, B] gradient of the positives' scores (both sides summed).
    """
    emb_l, emb_r = rows.embs
    num_chunks, chunk = grad_pos.shape
    lhs_pos, rhs_pos = emb_l[:, :chunk], emb_r[:, :chunk]
    # Mr_b = Gr_b + Gl_b^T + diag(g) and Ml_b = Mr_b^T.
    ml = grad_lhs_neg if grad_lhs_neg is not None else grad_pos.new_zeros(num_chunks, chunk, chunk)
    mr = grad_rhs_neg if grad_rhs_neg is not None else grad_pos.new_zeros(num_chunks, chunk, chunk)
    ml_b, mr_b = ml[:, :, :chunk], mr[:, :, :chunk]
    mr_b.add_(ml_b.transpose(1, 2))
    mr_b.diagonal(dim1=1, dim2=2).add_(grad_pos)  # masked diagonal: its gradient is 0
    ml_b.copy_(mr_b.transpose(1, 2))
    (grad_lhs_pos, grad_lhs_uni), (grad_rhs_pos, grad_rhs_uni) = rows.grads
    torch.bmm(mr, emb_r, out=grad_lhs_pos)
    torch.bmm(ml, emb_l, out=grad_rhs_pos)
    if grad_lhs_uni is not None:
        torch.bmm(ml[:, :, chunk:].transpose(1, 2), rhs_pos, out=grad_lhs_uni)
    if grad_rhs_uni is not None:
        torch.bmm(mr[:, :, chunk:].transpose(1, 2), lhs_pos, out=grad_rhs_uni)


def ranking_pairs(
    rows: BatchRows,
    grad_lhs_neg: FloatTensorType | None,
    grad_rhs_neg: FloatTensorType | None,
    grad_pos: tuple[FloatTensorType, FloatTensorType],
) -> Pairs:
    """The nonzero score gradients as ``(flat LHS row, flat RHS row, value)`` triples.

    Args:
        rows: The batch's rows (for the per-chunk row counts of each side).
        grad_lhs_neg: [C, B, B + Ul] LHS negatives' score gradients (RHS positive p
            against LHS row n), or None.
        grad_rhs_neg: [C, B, B + Ur] RHS negatives' score gradients (LHS positive p
            against RHS row n), or None.
        grad_pos: Each side's [C, B] positives' score gradients; a positive's row of a
            side's negative gradients is all zero where its gradient is 0 (ranking loss).
    """
    num_chunks, chunk = grad_pos[0].shape
    maps = _pair_maps(num_chunks, chunk, rows.embs[0].shape[1], rows.embs[1].shape[1])
    parts = []
    for grad, side_pos, side_maps in ((grad_lhs_neg, grad_pos[0], maps[0]), (grad_rhs_neg, grad_pos[1], maps[1])):
        if grad is not None:
            parts.append(_nonzero_pairs(grad, side_pos, *side_maps))
    total = (grad_pos[0] + grad_pos[1]).view(-1)
    at = total.nonzero().squeeze(1)
    parts.append((maps[2][0].index_select(0, at), maps[2][1].index_select(0, at), total.index_select(0, at)))
    lhs, rhs, values = zip(*parts, strict=True)
    return torch.cat(lhs), torch.cat(rhs), torch.cat(values)


def _nonzero_pairs(
    grad: FloatTensorType, grad_pos: FloatTensorType, lhs_map: LongTensorType, rhs_map: LongTensorType
) -> Pairs:
    """The nonzero entries of one side's ``grad`` [C, B, N] as pairs (see :func:`_pair_maps`).

    Only rows whose positive has a nonzero gradient are scanned: ``nonzero`` over the
    whole matrix costs more than the rest of the sparse backward.
    """
    num_neg = grad.shape[2]
    active = grad_pos.view(-1).nonzero().squeeze(1)
    sub = grad.view(-1, num_neg).index_select(0, active)
    row, col = sub.nonzero().unbind(1)
    flat = active.index_select(0, row).mul_(num_neg).add_(col)
    return lhs_map.index_select(0, flat), rhs_map.index_select(0, flat), sub[row, col]


@functools.lru_cache(maxsize=8)
def _pair_maps(num_chunks: int, chunk: int, n_l: int, n_r: int) -> tuple[tuple[LongTensorType, LongTensorType], ...]:
    """Flat LHS and RHS rows of every entry of the LHS / RHS negatives' scores and of the positives.

    Entry ``(c, p, n)`` of the LHS negatives pairs LHS row ``c n_l + n`` with the RHS
    positive ``c n_r + p``; of the RHS negatives, LHS positive ``c n_l + p`` with RHS row
    ``c n_r + n``; positive ``(c, p)`` pairs ``c n_l + p`` with ``c n_r + p``.
    """
    c = torch.arange(num_chunks).view(-1, 1, 1)
    p = torch.arange(chunk).view(1, -1, 1)
    lhs_pos, rhs_pos = c * n_l + p, c * n_r + p

    def flat(x: LongTensorType, n: int) -> LongTensorType:
        return x.expand(num_chunks, chunk, n).flatten()

    lhs_negs = (flat(c * n_l + torch.arange(n_l), n_l), flat(rhs_pos, n_l))
    rhs_negs = (flat(lhs_pos, n_r), flat(c * n_r + torch.arange(n_r), n_r))
    return lhs_negs, rhs_negs, (lhs_pos.flatten(), rhs_pos.flatten())
