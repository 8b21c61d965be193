"""Loss functions over positive scores [P] and negative scores [P, N] (PBG 1.9).

Every loss is reduced with a SUM over positives (not a mean) and takes an optional
per-edge weight [P] multiplying each positive's term. Masked negatives arrive as
``-1e9`` (as in PBG: padding, a positive paired with itself, filtered known edges); they,
and ``-inf`` scores, contribute exactly 0 and never produce NaN values or gradients.

Constructors take ``margin=`` as a keyword (ignored by losses without a margin).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pbg_core.errors import ShapeError
from pbg_core.kernels import fused
from pbg_core.registry import Registry
from pbg_core.types import FloatTensorType

LOSS_FUNCTIONS: Registry[type[LossFunction]] = Registry("loss function")

# Masked scores are clamped here before exp/log (logsumexp of an all -inf row has a NaN
# gradient); at -1e9 their exp underflows to exactly 0, as in PBG.
_MASK_FLOOR = -1e9


def _check(pos: FloatTensorType, neg: FloatTensorType, weight: FloatTensorType | None) -> tuple[int, int]:
    if pos.dim() != 1 or neg.dim() != 2 or neg.shape[0] != pos.shape[0]:
        raise ShapeError(f"loss needs pos [P] and neg [P, N], got {tuple(pos.shape)} and {tuple(neg.shape)}")
    if weight is not None and weight.shape != pos.shape:
        raise ShapeError(f"loss weight must have shape {tuple(pos.shape)}, got {tuple(weight.shape)}")
    return pos.shape[0], neg.shape[1]


def _value_only(pos: FloatTensorType, neg: FloatTensorType, weight: FloatTensorType | None) -> bool:
    """No gradient is wanted and the kernels take these tensors."""
    wants_grad = torch.is_grad_enabled() and (pos.requires_grad or neg.requires_grad)
    return not wants_grad and fused.accepts(floats=(pos, neg, *(() if weight is None else (weight,))))


class LossFunction:
    """Base class: ``loss(pos, neg, weight) -> scalar``.

    Args:
        margin: Margin of the ranking loss; unused by the others.
    """

    def __init__(self, margin: float = 0.1) -> None:
        self.margin = margin

    def __call__(
        self, pos: FloatTensorType, neg: FloatTensorType, weight: FloatTensorType | None = None
    ) -> FloatTensorType:
        """Summed loss over the positives (a 0-dim tensor)."""
        raise NotImplementedError


@LOSS_FUNCTIONS.register("ranking")
class RankingLoss(LossFunction):
    """sum_i w_i sum_j max(0, (t_ij - s_i) + margin); 0 when P or N is 0.

    As PBG's ``F.margin_ranking_loss``: the hinge is ``(t - s) + margin`` in that order of
    operations, and a pair exactly at the hinge (0) still passes its gradient (``clamp_min``
    lets ``x >= 0`` through; ``relu`` would stop it).
    """

    def __call__(
        self, pos: FloatTensorType, neg: FloatTensorType, weight: FloatTensorType | None = None
    ) -> FloatTensorType:
        num_pos, num_neg = _check(pos, neg, weight)
        if num_pos == 0 or num_neg == 0:
            return pos.new_zeros(()) + 0.0 * pos.sum()
        hinge = (neg - pos.unsqueeze(1)).add_(self.margin).clamp_min(0)
        if weight is None:
            return hinge.sum()
        return (hinge.sum(1) * weight).sum()


@LOSS_FUNCTIONS.register("logistic")
class LogisticLoss(LossFunction):
    """sum_i w_i [BCE(s_i, 1) + (1/N) sum_j BCE(t_ij, 0)]."""

    def __call__(
        self, pos: FloatTensorType, neg: FloatTensorType, weight: FloatTensorType | None = None
    ) -> FloatTensorType:
        _num_pos, num_neg = _check(pos, neg, weight)
        pos_terms = F.softplus(-pos)  # BCE(s, 1) = log(1 + e^-s)
        if num_neg > 0:
            # BCE(t, 0) = softplus(t); softplus(-inf) = 0 with a 0 gradient.
            per_pos = pos_terms + F.softplus(neg).sum(1) / num_neg
        else:
            per_pos = pos_terms
        if weight is not None:
            per_pos = per_pos * weight
        return per_pos.sum()


@LOSS_FUNCTIONS.register("softmax")
class SoftmaxLoss(LossFunction):
    """sum_i w_i [-s_i + log(e^{s_i} + sum_j e^{t_ij})] (positive in the denominator)."""

    def __call__(
        self, pos: FloatTensorType, neg: FloatTensorType, weight: FloatTensorType | None = None
    ) -> FloatTensorType:
        _num_pos, num_neg = _check(pos, neg, weight)
        if num_neg == 0:
            return pos.new_zeros(()) + 0.0 * pos.sum()
        if _value_only(pos, neg, weight):  # evaluation: one fused pass, the scores untouched
            return pos.new_tensor(fused.softmax_loss(pos, neg, weight))
        neg_lse = neg.clamp_min(_MASK_FLOOR).logsumexp(dim=1)
        per_pos = torch.logaddexp(pos, neg_lse) - pos
        if weight is not None:
            per_pos = per_pos * weight
        return per_pos.sum()


def build_loss(name: str, margin: float = 0.1) -> LossFunction:
    """The loss registered as ``name``.

    Raises:
        UnknownNameError: ``name`` is not registered (lists the known names).
    """
    return LOSS_FUNCTIONS.get(name)(margin=margin)
