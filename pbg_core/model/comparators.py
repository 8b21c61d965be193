"""Comparators c(x, y): score pairs of prepared embeddings (PBG 1.8).

A comparator has three steps:
- ``prepare(x)``: applied to every embedding after the operator (``cos`` L2-normalises);
- ``pos_scores(a, b)``: pairwise scores of two ``[..., D]`` tensors -> ``[...]``;
- ``neg_scores(pos, neg, out=None)``: ``pos`` [C, P, D] against the chunk's negatives [C, N, D]
  -> [C, P, N], batched with ``bmm``/``baddbmm`` (possibly a transposed view). Without autograd
  the scores may be written into ``out``, a contiguous [C, P, N] buffer: ranking every entity
  reuses one buffer for all its blocks of scores (a fresh 64 MiB block is mapped and its pages
  faulted in anew each time). The same operations in the same order, so the same bits.

``BiasedComparator`` (config ``bias=true``) treats dim 0 as a bias: the base
comparator sees dims ``1:`` and both sides' dim 0 are added to every score.
"""

from __future__ import annotations

import torch

from pbg_core.registry import Registry
from pbg_core.types import FloatTensorType

COMPARATORS: Registry[type[Comparator]] = Registry("comparator")


class Comparator:
    """Base comparator: identity prepare; subclasses define the two scores."""

    def prepare(self, embs: FloatTensorType) -> FloatTensorType:
        """Adjust embeddings before comparison (identity by default)."""
        return embs

    def pos_scores(self, lhs: FloatTensorType, rhs: FloatTensorType) -> FloatTensorType:
        """Row-wise scores of ``lhs`` [..., D] and ``rhs`` [..., D] -> [...]."""
        raise NotImplementedError

    def neg_scores(
        self, pos: FloatTensorType, neg: FloatTensorType, out: FloatTensorType | None = None
    ) -> FloatTensorType:
        """Scores of ``pos`` [C, P, D] against ``neg`` [C, N, D] -> [C, P, N].

        ``out``: without autograd only, a contiguous [C, P, N] buffer to write them into (returned).
        """
        raise NotImplementedError


@COMPARATORS.register("dot")
class DotComparator(Comparator):
    """c(x, y) = x . y"""

    def pos_scores(self, lhs: FloatTensorType, rhs: FloatTensorType) -> FloatTensorType:
        return (lhs * rhs).sum(-1)

    def neg_scores(
        self, pos: FloatTensorType, neg: FloatTensorType, out: FloatTensorType | None = None
    ) -> FloatTensorType:
        if out is not None:
            return torch.bmm(pos, neg.transpose(-1, -2), out=out)
        if neg.requires_grad:
            # (neg pos^T)^T: the same products, but autograd then hands the (large)
            # negatives a contiguous gradient instead of one that needs a copy.
            return torch.bmm(neg, pos.transpose(-1, -2)).transpose(-1, -2)
        return torch.bmm(pos, neg.transpose(-1, -2))


@COMPARATORS.register("cos")
class CosComparator(DotComparator):
    """Dot product of L2-normalised embeddings."""

    def prepare(self, embs: FloatTensorType) -> FloatTensorType:
        # PBG multiplies by the reciprocal norm; the clamp keeps an all-zero row at zero
        # instead of NaN (PBG would produce NaN there).
        norm = embs.norm(2, dim=-1, keepdim=True).clamp_min(1e-30)
        normed: FloatTensorType = embs * norm.reciprocal()
        return normed


def _squared_distances(
    pos: FloatTensorType, neg: FloatTensorType, out: FloatTensorType | None = None
) -> FloatTensorType:
    """||p - n||^2 for all pairs per chunk as PBG computes it: ``(|n|^2 - 2 p.n) + |p|^2``.

    One ``baddbmm``, squared norms as ``norm().pow(2)``, in PBG's order of operations. The
    result may be slightly negative for (nearly) equal vectors: PBG does not clamp it.
    ``out``: the [C, P, N] buffer written into, without autograd (see ``neg_scores``).
    """
    pos_sq, neg_sq = pos.norm(dim=-1).pow(2), neg.norm(dim=-1).pow(2)  # [C, P], [C, N]
    if neg.requires_grad:
        # Computed as [C, N, P] and transposed (the same sums): see DotComparator.neg_scores.
        scores = torch.baddbmm(neg_sq.unsqueeze(-1), neg, pos.transpose(-1, -2), alpha=-2)
        return scores.add(pos_sq.unsqueeze(-2)).transpose(-1, -2)
    if out is not None:
        torch.baddbmm(neg_sq.unsqueeze(-2), pos, neg.transpose(-1, -2), alpha=-2, out=out)
        return out.add_(pos_sq.unsqueeze(-1))
    return torch.baddbmm(neg_sq.unsqueeze(-2), pos, neg.transpose(-1, -2), alpha=-2).add_(pos_sq.unsqueeze(-1))


@COMPARATORS.register("l2")
class L2Comparator(Comparator):
    """c(x, y) = -||x - y|| (squared distance clamped at 1e-30 before the sqrt)."""

    def pos_scores(self, lhs: FloatTensorType, rhs: FloatTensorType) -> FloatTensorType:
        return (lhs - rhs).pow(2).sum(-1).clamp_min(1e-30).sqrt().neg()

    def neg_scores(
        self, pos: FloatTensorType, neg: FloatTensorType, out: FloatTensorType | None = None
    ) -> FloatTensorType:
        if out is not None:
            return _squared_distances(pos, neg, out).clamp_min_(1e-30).sqrt_().neg_()
        return _squared_distances(pos, neg).clamp_min(1e-30).sqrt().neg()


@COMPARATORS.register("squared_l2")
class SquaredL2Comparator(Comparator):
    """c(x, y) = -||x - y||^2"""

    def pos_scores(self, lhs: FloatTensorType, rhs: FloatTensorType) -> FloatTensorType:
        return (lhs - rhs).pow(2).sum(-1).neg()

    def neg_scores(
        self, pos: FloatTensorType, neg: FloatTensorType, out: FloatTensorType | None = None
    ) -> FloatTensorType:
        # Not clamped at 0, as in PBG: rounding may leave a tiny negative distance, so a
        # negative equal to the positive can score a hair above it (and rank ahead of it).
        if out is not None:
            return _squared_distances(pos, neg, out).neg_()
        return _squared_distances(pos, neg).neg()


class BiasedComparator(Comparator):
    """Dim 0 is a bias added to the score; ``base`` compares dims ``1:``.

    Args:
        base: The comparator applied to dims ``1:``.
    """

    def __init__(self, base: Comparator) -> None:
        self.base = base

    def prepare(self, embs: FloatTensorType) -> FloatTensorType:
        return torch.cat([embs[..., :1], self.base.prepare(embs[..., 1:])], dim=-1)

    def pos_scores(self, lhs: FloatTensorType, rhs: FloatTensorType) -> FloatTensorType:
        return self.base.pos_scores(lhs[..., 1:], rhs[..., 1:]) + lhs[..., 0] + rhs[..., 0]

    def neg_scores(
        self, pos: FloatTensorType, neg: FloatTensorType, out: FloatTensorType | None = None
    ) -> FloatTensorType:
        scores = self.base.neg_scores(pos[..., 1:], neg[..., 1:], out)
        if out is not None:  # the same two additions, in the same order, in place
            return out.add_(pos[..., 0].unsqueeze(-1)).add_(neg[..., 0].unsqueeze(-2))
        return scores + pos[..., 0].unsqueeze(-1) + neg[..., 0].unsqueeze(-2)


def build_comparator(name: str, bias: bool = False) -> Comparator:
    """The comparator registered as ``name``, wrapped in a bias if ``bias``.

    Raises:
        UnknownNameError: ``name`` is not registered (lists the known names).
    """
    base = COMPARATORS.get(name)()
    return BiasedComparator(base) if bias else base
