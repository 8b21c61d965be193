"""Hand-written forward and backward of the most common training batch (PBG 1.8-1.12).

:func:`supports` selects batches with batch + uniform negatives (``num_batch_negs > 0``,
no ``all_negs``), operator ``none``, the ``dot`` or ``cos`` comparator without bias,
the ranking, logistic or softmax loss, no regularizer, no global embeddings, no
featurized entity type, and a batch that fills whole chunks. :func:`train_batch` then
computes the same loss, gradients and RowAdagrad updates as the generic autograd path
of :mod:`pbg_core.batching` (tests hold them within 1e-5), drawing the same uniform
negatives from the generator. Why it is cheaper:

- Each side's rows are gathered in one ``index_select`` laid out per chunk as
  ``[chunk positives, chunk uniforms]`` (both sides in one call when they share a
  table), so a chunk's negatives ``[C, B + U, D]`` are a view, never a ``cat``.
- With no operator both score matrices use raw embeddings, so the LHS batch-negative
  block ``R L^T`` is the transpose of the RHS one ``L R^T``: computed once.
- The loss gradient is closed form; the embedding gradients come from four ``bmm``
  written straight into the gradient buffer, the positives' term folded onto the
  (masked, zero-gradient) diagonal of the batch block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pbg_core.comparators import CosComparator, DotComparator
from pbg_core.losses import LogisticLoss, LossFunction, RankingLoss, SoftmaxLoss
from pbg_core.model import MASKED, MultiRelationEmbedder
from pbg_core.negatives import sample_uniform
from pbg_core.operators import IdentityDynamicOperator, IdentityOperator
from pbg_core.optimizers import RowAdagrad
from pbg_core.row_gather import gather_rows
from pbg_core.stats import Stats
from pbg_core.types import FloatTensorType, LongTensorType, Side

if TYPE_CHECKING:
    from pbg_core.batching import BatchSettings, BucketTables, Trainer
    from pbg_core.edgelist import EdgeList

_COMPARATORS = (DotComparator, CosComparator)
_LOSSES = (RankingLoss, LogisticLoss, SoftmaxLoss)
_IDENTITY_OPERATORS = (IdentityOperator, IdentityDynamicOperator)
_COS_EPS = 1e-30  # CosComparator's clamp of the norm


def supports(
    model: MultiRelationEmbedder, loss_fn: LossFunction, settings: BatchSettings, rel: int, num_pos: int
) -> bool:
    """Whether :func:`train_batch` computes this batch exactly like the generic path.

    Args:
        model: The scoring model.
        loss_fn: The loss function.
        settings: Batching settings.
        rel: The batch's relation (0 in dynamic mode).
        num_pos: Number of edges in the batch.
    """
    if type(model.comparator) not in _COMPARATORS or type(loss_fn) not in _LOSSES:
        return False
    if model.regularizer is not None or model.global_embs is not None:
        return False
    if settings.num_batch_negs <= 0 or (settings.disable_lhs_negs and settings.disable_rhs_negs):
        return False
    spec = model.relation(rel)
    if spec.all_negs or spec.lhs in model.featurized or spec.rhs in model.featurized:
        return False
    ops = [model.lhs_operators[0], model.rhs_operators[0]] if model.dynamic else [model.rhs_operators[rel]]
    if not all(type(op) in _IDENTITY_OPERATORS for op in ops):
        return False
    # A short last chunk needs zero padding and masks: left to the generic path.
    return num_pos > 0 and num_pos % min(settings.num_batch_negs, num_pos) == 0


def train_batch(trainer: Trainer, tables: BucketTables, batch: EdgeList, rel: int, generator: torch.Generator) -> Stats:
    """Train one batch accepted by :func:`supports`; returns its stats (as the generic path).

    Args:
        trainer: Model, loss, optimizers and settings.
        tables: Shared tables and RowAdagrad states (updated in place).
        batch: The batch's edges.
        rel: The batch's relation (0 in dynamic mode).
        generator: Source of the uniform negatives (drawn LHS first, as the generic path).
    """
    model, settings = trainer.model, trainer.settings
    spec = model.relation(rel)
    num_pos = len(batch)
    chunk = min(settings.num_batch_negs, num_pos)
    num_chunks = num_pos // chunk
    lhs_on, rhs_on = not settings.disable_lhs_negs, not settings.disable_rhs_negs
    keys = ((spec.lhs, Side.LHS), (spec.rhs, Side.RHS))
    uniforms = [
        _uniform(num_chunks, settings.num_uniform_negs if on else 0, tables.embeddings[key].shape[0], generator)
        for key, on in ((keys[0], lhs_on), (keys[1], rhs_on))
    ]
    rows = _BatchRows(tables, keys, (batch.lhs.tensor, batch.rhs.tensor), uniforms, chunk, settings.max_norm)
    if type(model.comparator) is CosComparator:
        rows.normalize()
    emb_l, emb_r = rows.embs
    lhs_pos, rhs_pos = emb_l[:, :chunk], emb_r[:, :chunk]

    pos = (lhs_pos * rhs_pos).sum(-1)  # [C, B]
    lhs_neg, rhs_neg = _negative_scores(emb_l, emb_r, chunk, lhs_on, rhs_on)
    scale = spec.weight if batch.weight is None else batch.weight.reshape(num_chunks, chunk) * spec.weight
    loss_l, gpos_l, grad_lhs_neg, viol_l = _loss_grads(trainer.loss_fn, pos, lhs_neg, scale)
    loss_r, gpos_r, grad_rhs_neg, viol_r = _loss_grads(trainer.loss_fn, pos, rhs_neg, scale)

    # d loss / d rows. With Gl, Gr the score gradients and g the positives' gradient:
    # dL = Mr [R; Ur] and dR = Ml [L; Ul], where the batch blocks are
    # Mr_b = Gr_b + Gl_b^T + diag(g) and Ml_b = Mr_b^T; dUl = Gl_u^T R, dUr = Gr_u^T L.
    ml = grad_lhs_neg if grad_lhs_neg is not None else pos.new_zeros(num_chunks, chunk, chunk)
    mr = grad_rhs_neg if grad_rhs_neg is not None else pos.new_zeros(num_chunks, chunk, chunk)
    ml_b, mr_b = ml[:, :, :chunk], mr[:, :, :chunk]
    mr_b.add_(ml_b.transpose(1, 2))
    mr_b.diagonal(dim1=1, dim2=2).add_(gpos_l).add_(gpos_r)  # masked diagonal: its gradient is 0
    ml_b.copy_(mr_b.transpose(1, 2))
    (grad_lhs_pos, grad_lhs_uni), (grad_rhs_pos, grad_rhs_uni) = rows.grads
    torch.bmm(mr, emb_r, out=grad_lhs_pos)
    torch.bmm(ml, emb_l, out=grad_rhs_pos)
    if grad_lhs_uni is not None:
        torch.bmm(ml[:, :, chunk:].transpose(1, 2), rhs_pos, out=grad_lhs_uni)
    if grad_rhs_uni is not None:
        torch.bmm(mr[:, :, chunk:].transpose(1, 2), lhs_pos, out=grad_rhs_uni)
    rows.step(trainer.row_optimizer)

    metrics = {
        "loss": float(loss_l + loss_r),
        "reg": 0.0,
        "violators_lhs": float(viol_l),
        "violators_rhs": float(viol_r),
    }
    return Stats(count=num_pos, metrics=metrics)


def _uniform(num_chunks: int, num_uniform: int, count: int, generator: torch.Generator) -> LongTensorType | None:
    return sample_uniform(num_chunks, num_uniform, count, generator) if num_uniform > 0 else None


class _BatchRows:
    """The rows a batch reads from the shared tables, and the gradient buffers they get.

    Rows are gathered per side laid out per chunk, ``[chunk positives, chunk uniforms]``,
    so :attr:`embs` ``[C, B + U, D]`` are views; one ``index_select`` when both sides
    share a table. Gradients go to contiguous blocks ``[positives; uniforms]`` per side
    (so ``bmm`` can write them in place), with their own index order.
    """

    def __init__(
        self,
        tables: BucketTables,
        keys: tuple[tuple[str, Side], tuple[str, Side]],
        positives: tuple[LongTensorType, LongTensorType],
        uniforms: list[LongTensorType | None],
        chunk: int,
        max_norm: float | None,
    ) -> None:
        self.tables, self.keys = tables, keys
        lhs_table, rhs_table = (tables.embeddings[k] for k in keys)
        self.shared = lhs_table.data_ptr() == rhs_table.data_ptr() and lhs_table.shape == rhs_table.shape
        gather_idx, grad_idx = [], []
        for pos, uni in zip(positives, uniforms):
            if uni is None:
                gather_idx.append(pos)
                grad_idx.append(pos)
            else:
                gather_idx.append(torch.cat([pos.reshape(uni.shape[0], chunk), uni], dim=1).flatten())
                grad_idx.append(torch.cat([pos, uni.flatten()]))
        sizes = [idx.numel() for idx in gather_idx]
        num_chunks, dim = positives[0].numel() // chunk, lhs_table.shape[1]
        if self.shared:
            self.grad_idx = [torch.cat(grad_idx)]
            flat = list(gather_rows(lhs_table, torch.cat(gather_idx), max_norm).split(sizes))
            self.grad_bufs = [flat[0].new_empty(sum(sizes), dim)]
            grad_flat = list(self.grad_bufs[0].split(sizes))
        else:
            self.grad_idx = grad_idx
            flat = [gather_rows(t, idx, max_norm) for t, idx in zip((lhs_table, rhs_table), gather_idx)]
            self.grad_bufs = [torch.empty_like(x) for x in flat]
            grad_flat = self.grad_bufs
        self.embs = [x.view(num_chunks, -1, x.shape[1]) for x in flat]
        self.grads: list[tuple[FloatTensorType, FloatTensorType | None]] = []
        for g, uni in zip(grad_flat, uniforms):
            parts = g.split([num_chunks * chunk, g.shape[0] - num_chunks * chunk])
            uni_grad = parts[1].view(num_chunks, -1, g.shape[1]) if uni is not None else None
            self.grads.append((parts[0].view(num_chunks, chunk, g.shape[1]), uni_grad))
        self.inv_norms: list[FloatTensorType] | None = None
        self.clamped: list[torch.Tensor] = []

    def normalize(self) -> None:
        """Apply ``CosComparator.prepare`` to the rows in place (undone in :meth:`step`)."""
        norms = [e.norm(2, dim=-1, keepdim=True) for e in self.embs]
        self.clamped = [n < _COS_EPS for n in norms]
        self.inv_norms = [n.clamp_min_(_COS_EPS).reciprocal_() for n in norms]
        for e, inv in zip(self.embs, self.inv_norms):
            e.mul_(inv)

    def step(self, optimizer: RowAdagrad) -> None:
        """Map gradients back through ``prepare`` and apply RowAdagrad per table."""
        if self.inv_norms is not None:
            for emb, inv, clamped, (grad_pos, grad_uni) in zip(self.embs, self.inv_norms, self.clamped, self.grads):
                b = grad_pos.shape[1]
                _cos_backward_(emb[:, :b], grad_pos, inv[:, :b], clamped[:, :b])
                if grad_uni is not None:
                    _cos_backward_(emb[:, b:], grad_uni, inv[:, b:], clamped[:, b:])
        for key, idx, grad in zip(self.keys, self.grad_idx, self.grad_bufs):
            optimizer.step(self.tables.embeddings[key], self.tables.optim_state[key], idx, grad, grads_writable=True)


def _cos_backward_(
    unit: FloatTensorType, grad: FloatTensorType, inv_norm: FloatTensorType, clamped: torch.Tensor
) -> None:
    """Turn ``grad`` (w.r.t. ``x / max(|x|, eps)``, whose value is ``unit``) into the gradient w.r.t. ``x``.

    Where the norm was clamped the factor is a constant, so only ``inv_norm * grad`` remains.
    """
    radial = (unit * grad).sum(-1, keepdim=True)
    radial.masked_fill_(clamped, 0.0)
    grad.sub_(unit * radial).mul_(inv_norm)


def _negative_scores(
    emb_l: FloatTensorType, emb_r: FloatTensorType, chunk: int, lhs_on: bool, rhs_on: bool
) -> tuple[FloatTensorType | None, FloatTensorType | None]:
    """Masked negative scores [C, B, B + U] per enabled side (None when disabled).

    LHS negatives are scored against the RHS positives and vice versa; the batch block
    of one is the transpose of the other's, so it is computed once.
    """
    lhs_pos, rhs_pos = emb_l[:, :chunk], emb_r[:, :chunk]
    rhs_neg = torch.bmm(lhs_pos, emb_r.transpose(1, 2)) if rhs_on else None
    lhs_neg = None
    if lhs_on and rhs_neg is not None:
        rhs_neg[:, :, :chunk].diagonal(dim1=1, dim2=2).add_(MASKED)
        lhs_neg = emb_l.new_empty(emb_l.shape[0], chunk, emb_l.shape[1])
        lhs_neg[:, :, :chunk] = rhs_neg[:, :, :chunk].transpose(1, 2)
        if emb_l.shape[1] > chunk:
            torch.bmm(rhs_pos, emb_l[:, chunk:].transpose(1, 2), out=lhs_neg[:, :, chunk:])
        return lhs_neg, rhs_neg
    if lhs_on:
        lhs_neg = torch.bmm(rhs_pos, emb_l.transpose(1, 2))
    for scores in (lhs_neg, rhs_neg):
        if scores is not None:
            scores[:, :, :chunk].diagonal(dim1=1, dim2=2).add_(MASKED)
    return lhs_neg, rhs_neg


def _loss_grads(
    loss_fn: LossFunction, pos: FloatTensorType, neg: FloatTensorType | None, scale: float | FloatTensorType
) -> tuple[FloatTensorType, FloatTensorType, FloatTensorType | None, FloatTensorType]:
    """One side's loss and its gradients (as autograd would give them).

    Args:
        loss_fn: Ranking, logistic or softmax loss.
        pos: [C, B] positive scores.
        neg: [C, B, N] masked negative scores, or None when the side has no negatives.
        scale: Relation weight, times the per-edge weights [C, B] if any.

    Returns:
        ``(scaled loss, d loss / d pos, d loss / d neg or None, violators)``; ``neg``
        is reused as the buffer of its gradient.
    """
    zero = pos.new_zeros(())
    if neg is None:
        if isinstance(loss_fn, LogisticLoss):
            return (F.softplus(-pos) * scale).sum(), torch.sigmoid(-pos).mul_(scale).neg_(), None, zero
        return zero, torch.zeros_like(pos), None, zero
    scale_col = scale.unsqueeze(-1) if isinstance(scale, torch.Tensor) else scale
    violators = (neg > pos.unsqueeze(-1)).sum()
    if isinstance(loss_fn, RankingLoss):
        hinge = neg.sub_((pos - loss_fn.margin).unsqueeze(-1)).clamp_min_(0)
        loss = (hinge.sum(-1) * scale).sum()
        grad = hinge.sign_()  # 1 where the hinge is active (relu's gradient), else 0
        if not (isinstance(scale, float) and scale == 1.0):
            grad.mul_(scale_col)
        return loss, grad.sum(-1).neg_(), grad, violators
    if isinstance(loss_fn, SoftmaxLoss):
        # Masked scores sit at -1e9, whose exp underflows to 0 (as in the generic path).
        lse = neg.logsumexp(-1)
        loss = ((torch.logaddexp(pos, lse) - pos) * scale).sum()
        p_neg = torch.sigmoid(lse - pos).mul_(scale)  # total softmax mass on the negatives
        grad = neg.sub_(lse.unsqueeze(-1)).exp_().mul_(p_neg.unsqueeze(-1))
        return loss, p_neg.neg(), grad, violators
    num_neg = neg.shape[-1]
    loss = ((F.softplus(-pos) + F.softplus(neg).sum(-1) / num_neg) * scale).sum()
    grad = neg.sigmoid_().mul_(scale_col / num_neg)
    return loss, torch.sigmoid(-pos).mul_(scale).neg_(), grad, violators
