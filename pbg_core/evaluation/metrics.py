"""Ranking metrics and filtered evaluation over score tensors, as PBG's evaluators compute them.

Metrics are returned as *sums* over positives so that batches, workers and buckets
add up exactly in :class:`pbg_core.stats.Stats`; dividing by the count gives PBG's
means (``pos_rank`` = mean rank, ``mrr``, Hits@1/10/50 as ``r1``/``r10``/``r50``,
and the randomized ``auc``).

Conventions shared by every function here:
- masked negatives (a positive paired with itself, padding, known true edges of filtered
  evaluation) arrive scored ``-1e9``, as in PBG: they stay in the AUC's pool of negatives
  (every finite positive beats them) and count in no rank (unless a positive scores
  ``<= -1e9``, as in PBG); a negative scored ``-inf`` never counts in a rank;
- NaN is never allowed to flatter the model: a NaN negative counts as beating its
  positive, and a NaN positive is beaten by every unmasked negative (worst rank).
  Divergence itself is detected elsewhere (training loss), not here.

:class:`FilterIndex` finds, for many (anchor, relation) queries at once, every known
true edge, with sorting and ``searchsorted`` only (no Python loop per edge), so it
scales to buckets of millions of edges; :func:`mask_known` removes them from a score matrix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.errors import ShapeError
from pbg_core.kernels import fused
from pbg_core.model.embedder import MASKED
from pbg_core.stats import Stats
from pbg_core.types import FloatTensorType, LongTensorType, Side

HITS_AT = (1, 10, 50)


def ranks_from_scores(pos: FloatTensorType, neg: FloatTensorType) -> LongTensorType:
    """Rank of each positive among its negatives: ``1 + #(neg >= pos)``.

    Ties count against the positive (as in PBG). Negatives equal to ``-inf`` are
    masked and never count. NaN scores rank pessimistically: a NaN negative counts
    as ``>= pos``, and a NaN positive gets ``1 + #unmasked negatives``.

    Args:
        pos: Positive scores, shape ``[N]``.
        neg: Negative scores, shape ``[N, M]`` (``M`` may be 0).

    Returns:
        Ranks, int64 ``[N]``, each in ``[1, M + 1]``.

    Raises:
        ShapeError: if the shapes are not ``[N]`` and ``[N, M]``.
    """
    if pos.dim() != 1 or neg.dim() != 2 or neg.shape[0] != pos.shape[0]:
        raise ShapeError(f"expected pos [N] and neg [N, M], got pos {list(pos.shape)} and neg {list(neg.shape)}")
    if fused.accepts(floats=(pos, neg)):
        return fused.ranks_(pos, neg)
    pos_col = pos.unsqueeze(1)
    beats = (neg >= pos_col) | torch.isnan(neg) | torch.isnan(pos_col)
    beats &= neg != float("-inf")
    return beats.sum(dim=1, dtype=torch.int64) + 1


def rank_metric_sums(ranks: LongTensorType) -> dict[str, float]:
    """Sums over positives of the rank metrics.

    Args:
        ranks: Ranks from :func:`ranks_from_scores`, shape ``[N]``, all >= 1.

    Returns:
        ``{"pos_rank": sum(rank), "mrr": sum(1 / rank), "r1": #(rank <= 1),
        "r10": #(rank <= 10), "r50": #(rank <= 50)}`` as floats.
    """
    ranks64 = ranks.to(torch.float64)
    sums = {"pos_rank": float(ranks64.sum()), "mrr": float(ranks64.reciprocal().sum())}
    for k in HITS_AT:
        sums[f"r{k}"] = float((ranks <= k).sum())
    return sums


def auc_sum(
    pos: FloatTensorType,
    neg: FloatTensorType,
    generator: torch.Generator,
    num_samples: int | None = None,
) -> float:
    """PBG's randomized AUC, multiplied by the number of positives so it sums like the rest.

    Draws ``num_samples`` (default ``len(pos)``, PBG's batch size) random pairs of a
    positive and a negative, the negatives pooled across all positives, and returns
    ``len(pos) * fraction(pos > neg)``. The pool is every negative score, masked ones
    (``-1e9``) included, as PBG's ``compute_randomized_auc``; a NaN on either side of a
    pair counts as a loss. With no positives or no negatives the result is 0 (PBG does not
    call it then: the evaluator skips a side without negatives).

    Args:
        pos: Positive scores, any shape (flattened).
        neg: Negative scores, any shape (flattened).
        generator: Seeded source of the pair draws (positives first, then negatives).
        num_samples: Pairs to draw; defaults to the number of positives.

    Returns:
        The AUC estimate times ``pos.numel()``.
    """
    pos_flat, neg_flat = pos.reshape(-1), neg.reshape(-1)
    num_pos = pos_flat.numel()
    if num_pos == 0 or neg_flat.numel() == 0:
        return 0.0
    samples = num_pos if num_samples is None else num_samples
    if samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {samples}")
    pos_pick = pos_flat[torch.randint(num_pos, (samples,), generator=generator)]
    neg_pick = neg_flat[torch.randint(neg_flat.numel(), (samples,), generator=generator)]
    return num_pos * float((pos_pick > neg_pick).to(torch.float64).mean())


def chunk_eval_average(bucket_eval_stats: Iterable[Stats | None]) -> Stats | None:
    """PBG's ``eval_stats_chunk_avg``: the count-weighted mean of per-bucket eval stats.

    PBG averages the buckets' *before-training* eval stats of one (epoch, path,
    chunk) iteration, weighting each bucket by its edge count. With :class:`Stats`
    holding sums this is a plain sum; ``.to_dict()`` then gives the means.

    Args:
        bucket_eval_stats: One entry per bucket; ``None`` (no eval edges) is skipped.

    Returns:
        The summed stats, or ``None`` if no bucket had eval stats (PBG writes no row).
    """
    present = [stats for stats in bucket_eval_stats if stats is not None]
    if not present:
        return None
    return Stats.sum(present)


@dataclass(frozen=True)
class _SideLookup:
    """Known edges keyed by (rel, anchor) -> targets, sorted by key then target, deduplicated."""

    keys: LongTensorType  # rel * anchor_base + anchor, sorted
    targets: LongTensorType  # offsets on the looked-up side, aligned with keys
    anchor_base: int  # max anchor + 1: keys are unique per (rel, anchor)
    max_rel: int  # queries beyond it match nothing (and cannot overflow the key)

    @staticmethod
    def build(anchors: LongTensorType, rels: LongTensorType, targets: LongTensorType) -> _SideLookup:
        anchor_base = int(anchors.max()) + 1 if anchors.numel() else 1
        max_rel = int(rels.max()) if rels.numel() else -1
        keys = rels * anchor_base + anchors
        # Lexicographic (key, target) order by two stable sorts, without a combined
        # key that could overflow int64 for huge (rel, anchor, target) ranges.
        by_target = torch.sort(targets, stable=True).indices
        by_key = torch.sort(keys[by_target], stable=True).indices
        order = by_target[by_key]
        keys, targets = keys[order], targets[order]
        if keys.numel() > 1:
            # Duplicate edges (same edge in several filter paths) would repeat columns.
            fresh = torch.ones_like(keys, dtype=torch.bool)
            fresh[1:] = (keys[1:] != keys[:-1]) | (targets[1:] != targets[:-1])
            keys, targets = keys[fresh], targets[fresh]
        return _SideLookup(
            keys=keys.contiguous(), targets=targets.contiguous(), anchor_base=anchor_base, max_rel=max_rel
        )

    def lookup(self, anchors: LongTensorType, rels: LongTensorType) -> tuple[LongTensorType, LongTensorType]:
        valid = (anchors >= 0) & (anchors < self.anchor_base) & (rels >= 0) & (rels <= self.max_rel)
        query = torch.where(valid, rels * self.anchor_base + anchors, torch.full_like(anchors, -1))
        start = torch.searchsorted(self.keys, query, side="left")
        end = torch.searchsorted(self.keys, query, side="right")
        counts = torch.where(valid, end - start, torch.zeros_like(start))
        rows = torch.repeat_interleave(torch.arange(len(anchors)), counts)
        # Position j of the output belongs to row rows[j]; its index into targets is
        # start[row] + (j - first output position of that row).
        first_out = torch.cumsum(counts, 0) - counts
        within = torch.arange(len(rows)) - first_out[rows]
        cols = self.targets[start[rows] + within]
        return rows, cols


@dataclass(frozen=True)
class FilterIndex:
    """Known true edges of one bucket, for filtered ranking (vectorized, duplicates allowed).

    Build it from every filter path's edges of the bucket being evaluated; query it
    with :meth:`known`. Relation ids determine the entity types, so one index serves
    several relations and entity types.
    """

    _by_lhs: _SideLookup  # (rel, lhs) -> rhs offsets
    _by_rhs: _SideLookup  # (rel, rhs) -> lhs offsets

    @classmethod
    def build(cls, edges: EdgeList) -> FilterIndex:
        """Index the known true edges of one bucket.

        Args:
            edges: All known true edges of the bucket (filter paths concatenated);
                offsets only, so featurized entity types cannot be filtered.

        Returns:
            The index.
        """
        return cls.from_tensors(edges.lhs.tensor, edges.rel, edges.rhs.tensor)

    @classmethod
    def from_tensors(cls, lhs: LongTensorType, rel: LongTensorType, rhs: LongTensorType) -> FilterIndex:
        """Index known true edges given as raw offset tensors.

        Args:
            lhs: LHS offsets within their partition, shape ``[E]``.
            rel: Relation ids, shape ``[E]``.
            rhs: RHS offsets within their partition, shape ``[E]``.

        Returns:
            The index.

        Raises:
            ShapeError: if the three tensors are not 1-D of the same length.
            ValueError: if an offset or relation id is negative.
        """
        if not (lhs.dim() == rel.dim() == rhs.dim() == 1 and len(lhs) == len(rel) == len(rhs)):
            raise ShapeError(
                f"expected lhs, rel, rhs of shape [E], got {list(lhs.shape)}, {list(rel.shape)}, {list(rhs.shape)}"
            )
        lhs, rel, rhs = (t.to(torch.int64) for t in (lhs, rel, rhs))
        for name, values in (("lhs", lhs), ("rel", rel), ("rhs", rhs)):
            if values.numel() and int(values.min()) < 0:
                raise ValueError(f"known edges need {name} >= 0, got minimum {int(values.min())}")
        return cls(_by_lhs=_SideLookup.build(lhs, rel, rhs), _by_rhs=_SideLookup.build(rhs, rel, lhs))

    def __len__(self) -> int:
        """Number of distinct known edges."""
        return len(self._by_lhs.keys)

    def known(self, side: Side, anchors: LongTensorType, rels: LongTensorType) -> tuple[LongTensorType, LongTensorType]:
        """Every known true offset on ``side`` for each (anchor, relation) query.

        Query ``i`` is (``anchors[i]`` = offset on the *other* side, ``rels[i]``). For
        ``side=RHS`` the result lists every ``x`` with a known edge ``(anchor, rel, x)``;
        for ``side=LHS`` every ``x`` with ``(x, rel, anchor)``. Each (row, col) pair
        appears once even if the edge was given several times.

        Args:
            side: The side whose offsets are returned (the side being ranked).
            anchors: Offsets on ``side.other``, shape ``[B]``.
            rels: Relation ids, shape ``[B]``.

        Returns:
            ``(rows, cols)``, int64 of equal length: query index and known offset;
            rows are non-decreasing and, within a row, cols increase.

        Raises:
            ShapeError: if ``anchors`` and ``rels`` are not 1-D of the same length.
        """
        if anchors.dim() != 1 or rels.dim() != 1 or len(anchors) != len(rels):
            raise ShapeError(f"expected anchors and rels of shape [B], got {list(anchors.shape)}, {list(rels.shape)}")
        lookup = self._by_lhs if side is Side.RHS else self._by_rhs
        return lookup.lookup(anchors.to(torch.int64), rels.to(torch.int64))


def mask_known(
    neg: FloatTensorType,
    filter_index: FilterIndex,
    side: Side,
    anchors: LongTensorType,
    rels: LongTensorType,
    value: float = MASKED,
) -> tuple[LongTensorType, LongTensorType]:
    """Set the score of every known true edge in ``neg`` to ``value``, in place.

    Row ``i`` of ``neg`` scores every entity of ``side``'s partition (column = offset) for the
    query (``anchors[i]`` on the other side, ``rels[i]``). The default ``MASKED`` (-1e9) is PBG's
    filtered evaluator's: a known edge stays in the AUC's pool of negatives and out of the ranks.

    Args:
        neg: Scores ``[B, N]``, the columns the offsets of the partition ranked.
        filter_index: The known true edges of that partition's bucket.
        side: The side being ranked.
        anchors: Offsets on ``side.other``, shape ``[B]``.
        rels: Relation ids, shape ``[B]``.
        value: The score the known edges get.

    Returns:
        The ``(rows, cols)`` set, as :meth:`FilterIndex.known` gives them.
    """
    rows, cols = filter_index.known(side, anchors, rels)
    neg[rows, cols] = value
    return rows, cols
