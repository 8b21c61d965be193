"""Row-block invariance: a row's scores must not depend on how many rows share its product.

The BLAS picks its kernel by the shape of a product, and the kernels round differently: on
torch 2.13 with oneMKL 2024.2 (AVX512), a row of ``bmm``/``baddbmm`` (every comparator's
``neg_scores``) or of ``matmul``/``addmm`` (the linear and affine operators) computed among
1, 2, 3, 5, 6, 7, 9, 10 or 11 rows differs from the same row computed among 1000, by up to
1.5e-5 at D=100; zero-padding the rows to a multiple of 16 removed every difference for 1..59
rows, with 1 or 2 threads. Row-wise reductions (``pos_scores``, norms) never differed.

Evaluation scores its edges in blocks whose sizes depend on relation groups and worker slices,
and a trained model's answers score queries in blocks of their own: both pad, so a (query,
candidate) pair scores the same bits in each (tests/pbg_core/model/test_embedder.py measures
it on the machine that runs the tests). Training (autograd on) never pads.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# Rows of every product without autograd are padded to a multiple of this.
ROW_BLOCK = 16


def padded_rows(count: int) -> int:
    """``count`` rounded up to a multiple of :data:`ROW_BLOCK`: the rows a product of ``count`` rows computes."""
    return count + -count % ROW_BLOCK


def padded(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` with zero rows appended up to a multiple of :data:`ROW_BLOCK` (itself if none needed)."""
    extra = padded_rows(rows.shape[0]) - rows.shape[0]
    if extra == 0:
        return rows
    return torch.cat([rows, rows.new_zeros(extra, *rows.shape[1:])])


def by_padded_rows(fn: Callable[..., torch.Tensor], rows: torch.Tensor, *aligned: torch.Tensor | None) -> torch.Tensor:
    """``fn(rows, *aligned)`` computed on rows padded to :data:`ROW_BLOCK`, padding dropped.

    Args:
        fn: Row-wise in its result: output row i depends on input row i (and ``aligned[j][i]``).
        rows: [R, ...] the rows.
        aligned: Per-row tensors [R, ...] padded alike (zeros), or None (passed as None).
    """
    count = rows.shape[0]
    if count % ROW_BLOCK == 0:
        return fn(rows, *aligned)
    result = fn(padded(rows), *(None if a is None else padded(a) for a in aligned))
    return result[:count]
