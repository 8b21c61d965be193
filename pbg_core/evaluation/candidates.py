"""The candidates of sampled evaluation, on the workers' side: drawn distinct, masked where not negatives.

See :mod:`pbg_core.evaluation.sampling` for what sampled evaluation is; this module is what a
HOGWILD worker runs of it (it imports no config).
"""

from __future__ import annotations

import torch

from pbg_core.model.embedder import MASKED
from pbg_core.types import FloatTensorType, LongTensorType


def distinct_draw(total: int, num: int, generator: torch.Generator) -> LongTensorType:
    """``num`` distinct integers drawn uniformly from ``[0, total)``, sorted (all of them if ``num >= total``).

    Memory is O(num) unless ``num`` is at least half of ``total`` (then one permutation):
    draws with replacement are collected until ``num`` distinct values are in hand (a set
    uniform among the sets of its size, since the stopping rule only counts values), and a
    uniform ``num``-subset of it is kept.
    """
    if num >= total:
        return torch.arange(total)
    if 2 * num >= total:
        return torch.sort(torch.randperm(total, generator=generator)[:num]).values
    picked = torch.empty(0, dtype=torch.int64)
    while picked.numel() < num:
        more = torch.randint(total, (num - picked.numel() + 16,), generator=generator)
        picked = torch.unique(torch.cat([picked, more]))
    if picked.numel() > num:
        picked = torch.sort(picked[torch.randperm(picked.numel(), generator=generator)[:num]]).values
    return picked


def sample_candidates(num_chunks: int, num: int, count: int, generator: torch.Generator) -> LongTensorType:
    """Per chunk, ``num`` distinct offsets uniform in ``[0, count)``: shape ``[num_chunks, num]``.

    Raises:
        ValueError: ``num`` is more than ``count`` (:func:`check_candidates` says so earlier).
    """
    if num > count:
        raise ValueError(f"cannot draw {num} distinct candidates from a partition of {count} entities")
    if num == count:
        return torch.arange(count).expand(num_chunks, count)
    return torch.stack([distinct_draw(count, num, generator) for _ in range(num_chunks)])


def mask_candidates(
    neg: FloatTensorType,
    candidates: LongTensorType,
    chunk_size: int,
    own: LongTensorType,
    known: tuple[LongTensorType, LongTensorType] | None,
) -> None:
    """Mask (in place, ``-1e9``) each edge's candidates that are not negatives.

    Args:
        neg: Scores ``[P, K]`` of the edges against their chunk's candidates.
        candidates: Offsets ``[C, K]`` per chunk; edge ``i`` is in chunk ``i // chunk_size``.
        chunk_size: Edges per chunk.
        own: Offsets ``[P]`` of the edges' own entities on the ranked side (always masked).
        known: Filtered evaluation: ``(rows, cols)`` from
            :meth:`~pbg_core.evaluation.metrics.FilterIndex.known` (rows non-decreasing,
            cols increasing within a row), masked too; None for raw metrics.
    """
    num_pos = neg.shape[0]
    per_edge = candidates.repeat_interleave(chunk_size, dim=0)[:num_pos]
    drop = per_edge == own.unsqueeze(1)
    if known is not None and known[0].numel():
        rows, cols = known
        base = max(int(per_edge.max()), int(cols.max())) + 1
        # (row, offset) keys: the known ones are sorted already, as isin likes them.
        keys = torch.arange(num_pos).unsqueeze(1) * base + per_edge
        drop |= torch.isin(keys, rows * base + cols)
    neg.masked_fill_(drop, MASKED)
