"""Closed-form losses and score gradients of one batch's chunked scores (PBG 1.9).

The hand-written training paths (:mod:`pbg_core.training.fast_paths`,
:mod:`pbg_core.training.fast_dynamic`) score a batch as positives ``[C, B]`` and masked
negatives ``[C, B, N]`` per corrupted side and need, without autograd, what
:mod:`pbg_core.model.losses` plus ``backward`` would give: the scaled loss, its gradient
w.r.t. every score, and the number of violators. The negatives' buffer is reused for
their gradient. Tests hold both within float rounding of the autograd path.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from pbg_core.kernels import fused
from pbg_core.model.losses import LogisticLoss, LossFunction, RankingLoss, SoftmaxLoss
from pbg_core.training.workspace import scratch
from pbg_core.types import FloatTensorType

LOSSES = (RankingLoss, LogisticLoss, SoftmaxLoss)


class SideGrads(NamedTuple):
    """One side's loss and its score gradients (as autograd would give them)."""

    loss: FloatTensorType  # scaled loss
    grad_pos: FloatTensorType  # [C, B] d loss / d positive scores
    grad_neg: FloatTensorType | None  # [C, B, N] d loss / d negative scores (None without negatives)
    violators: FloatTensorType  # negatives scored above their positive
    active: FloatTensorType | None  # ranking loss only: number of nonzero entries of grad_neg


def loss_grads(
    loss_fn: LossFunction,
    pos: FloatTensorType,
    neg: FloatTensorType | None,
    scale: float | FloatTensorType,
    tag: str = "",
) -> SideGrads:
    """One side's loss and its gradients; ``neg`` is reused as the buffer of its gradient.

    Args:
        loss_fn: Ranking, logistic or softmax loss.
        pos: [C, B] positive scores.
        neg: [C, B, N] masked negative scores, or None when the side has no negatives.
        scale: Relation weight, times the per-edge weights [C, B] if any.
        tag: Suffix of the scratch buffers' names: results of calls with different tags
            can be alive at once.
    """
    zero = pos.new_zeros(())
    ranking = isinstance(loss_fn, RankingLoss)
    if neg is None:
        if isinstance(loss_fn, LogisticLoss):
            loss = (F.softplus(-pos) * scale).sum()
            return SideGrads(loss, torch.sigmoid(-pos).mul_(scale).neg_(), None, zero, None)
        return SideGrads(zero, torch.zeros_like(pos), None, zero, zero if ranking else None)
    if ranking:
        assert isinstance(loss_fn, RankingLoss)
        return ranking_grads(loss_fn, pos, neg.unsqueeze(0), scale, tag)[0]
    if isinstance(loss_fn, SoftmaxLoss):
        weights = scale if isinstance(scale, torch.Tensor) else pos.new_full(pos.shape, scale)
        if fused.accepts((neg, pos, weights)):
            grad_pos = scratch("grad_pos" + tag, pos.shape, pos.dtype)
            sums = torch.from_numpy(fused.softmax_grads_(neg, pos, weights, grad_pos))
            return SideGrads(sums[0], grad_pos, neg, sums[1], None)
    # neg > pos exactly when neg - pos > 0 (IEEE subtraction of distinct finite floats is
    # never 0); sign + sum is ~2.5x cheaper than a bool comparison and its sum.
    diff = torch.sub(neg, pos.unsqueeze(-1), out=scratch("diff" + tag, neg.shape, neg.dtype))
    violators = diff.clamp_min_(0).sign_().sum()
    scale_col = scale.unsqueeze(-1) if isinstance(scale, torch.Tensor) else scale
    if isinstance(loss_fn, SoftmaxLoss):
        # Masked scores sit at -1e9, whose exp underflows to 0 (as in the generic path).
        lse = neg.logsumexp(-1)
        loss = ((torch.logaddexp(pos, lse) - pos) * scale).sum()
        p_neg = torch.sigmoid(lse - pos).mul_(scale)  # total softmax mass on the negatives
        grad = neg.sub_(lse.unsqueeze(-1)).exp_().mul_(p_neg.unsqueeze(-1))
        return SideGrads(loss, p_neg.neg(), grad, violators, None)
    num_neg = neg.shape[-1]
    loss = ((F.softplus(-pos) + F.softplus(neg).sum(-1) / num_neg) * scale).sum()
    grad = neg.sigmoid_().mul_(scale_col / num_neg)
    return SideGrads(loss, torch.sigmoid(-pos).mul_(scale).neg_(), grad, violators, None)


def ranking_grads(
    loss_fn: RankingLoss,
    pos: FloatTensorType,
    negs: FloatTensorType,
    scale: float | FloatTensorType,
    tag: str = "",
) -> list[SideGrads]:
    """Ranking loss and gradients of ``S`` sides' negatives ``negs`` [S, C, B, N] (overwritten).

    One fused pass (:func:`pbg_core.kernels.fused.ranking_grads_`) when the tensors allow it,
    else the same arithmetic as torch ops on the stacked scores. ``tag`` as in
    :func:`loss_grads`.
    """
    weights = scale if isinstance(scale, torch.Tensor) else pos.new_full(pos.shape, scale)
    if fused.accepts((negs, pos, weights)):
        grad_pos = scratch("grad_pos" + tag, (negs.shape[0], *pos.shape), pos.dtype)
        sums = torch.from_numpy(fused.ranking_grads_(negs, pos, weights, loss_fn.margin, grad_pos))
        return [SideGrads(sums[s, 0], grad_pos[s], negs[s], sums[s, 1], sums[s, 2]) for s in range(negs.shape[0])]
    violators = (negs > pos.unsqueeze(-1)).sum((1, 2, 3)).to(torch.float64)
    hinge = negs.sub_(pos.unsqueeze(-1)).add_(loss_fn.margin)  # (t - s) + margin, as RankingLoss
    at_or_above = hinge >= 0  # clamp_min's gradient: a pair exactly at the hinge is active
    losses = (hinge.clamp_min_(0).sum(-1) * weights).sum((1, 2))
    active_pairs = hinge.copy_(at_or_above)  # 1 where the hinge is active, else 0
    counts = active_pairs.sum(-1)
    active = counts.sum((1, 2))
    grad_pos = counts.mul_(weights).neg_()
    grad = active_pairs.mul_(weights.unsqueeze(-1))
    return [SideGrads(losses[s], grad_pos[s], grad[s], violators[s], active[s]) for s in range(negs.shape[0])]
