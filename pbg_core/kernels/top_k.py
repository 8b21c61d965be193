"""Each row's ``k`` best scores in one pass (numba), ties broken by the lowest column.

Ranking every entity of a type (``pbg predict``, :mod:`pbg_core.evaluation.ranking`) keeps
the ``k`` best of blocks of ``[rows, 125k]`` scores. ``torch.topk`` breaks ties arbitrarily, so
its result needed a second pass to find the rows tied at the k-th value (a comparison and a sum
over the whole block) and a third to redo them; on ``[134, 125000]`` blocks that took twice as
long as the product that made the scores. Here each row is read once: an entry is compared with
the row's current k-th best, and only the few that beat it are inserted into a sorted list of
``k``; runs of ``CHUNK`` entries are tested at once by a vectorised loop, and a run with none
above the k-th best is skipped whole (on ``[128, 125000]`` blocks, 4x faster than entry by
entry). Rows are split between two threads (the loop releases the GIL), as the product uses both
cores.

Order, as :func:`torch.topk` orders values plus a rule for ties: NaN above every number (NaNs
among themselves by column), then by value descending, equal values by column ascending; ``-inf``
entries are kept like any other value (the caller marks them as empty slots).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import torch

from pbg_core.types import FloatTensorType, LongTensorType

MIN_SPLIT_ROWS = 8  # fewer rows run in the calling thread: a thread's start-up would cost more
CHUNK = 128  # entries tested at once against a row's k-th best (64 and 256 measured slower)
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="pbg-top-k")


def row_top_k(scores: FloatTensorType, k: int, threads: int = 2) -> tuple[FloatTensorType, LongTensorType]:
    """The ``k`` best entries of each row of ``scores`` ``[n, m]`` and their columns, ``[n, k]`` each.

    Args:
        scores: Contiguous float32 on the CPU (``pbg_core.kernels.fused.accepts``).
        k: 1 up to ``m``.
        threads: Row slices run at once (1 or 2).

    Raises:
        ValueError: ``k`` outside 1..m.
    """
    rows, cols = scores.shape
    if not 1 <= k <= cols:
        raise ValueError(f"k={k} is outside 1..{cols} (the columns of the scores)")
    vals = torch.empty((rows, k), dtype=torch.float32)
    picked = torch.empty((rows, k), dtype=torch.int64)
    s, v, c = scores.numpy(), vals.numpy(), picked.numpy()
    if threads < 2 or rows < 2 * MIN_SPLIT_ROWS:
        _top_k(s, k, v, c)
        return vals, picked
    half = rows // 2
    other = _POOL.submit(_top_k, s[half:], k, v[half:], c[half:])
    _top_k(s[:half], k, v[:half], c[:half])
    other.result()
    return vals, picked


def warm_up() -> None:
    """Call the kernel once on a tiny input: loads its cached machine code (see ``fused.warm_up``)."""
    _top_k(np.zeros((1, 2), np.float32), 1, np.zeros((1, 1), np.float32), np.zeros((1, 1), np.int64))


@numba.njit(nogil=True, cache=True, inline="always")
def _better(x, y):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Whether ``x`` goes strictly before ``y`` (``x`` from a later column): NaN first, then larger."""
    if x != x:
        return y == y
    return x > y


@numba.njit(nogil=True, cache=True, inline="always")
def _any_above(row, start, stop, worst):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Whether an entry of ``row[start:stop]`` is above ``worst`` or NaN: a loop the compiler vectorises.

    Indexed by unsigned integers: with a signed index numba checks each one for a negative
    (wrap-around) value, and that check keeps the loop scalar (1.2 entries per ns instead of 9).
    """
    hit = 0
    for t in range(stop - start):
        x = row[numba.uint64(start + t)]
        hit |= (x > worst) | (x != x)
    return hit


@numba.njit(nogil=True, cache=True)
def _top_k(scores, k, vals, cols):  # type: ignore[no-untyped-def]  # pragma: no cover
    """Each row's top ``k`` into ``vals``/``cols``; once the list is full, a run of ``CHUNK`` entries
    none of which beats its k-th best (nor is NaN) is skipped whole: the entry-by-entry loop
    below would skip each of them, and that list cannot change within the run."""
    rows, width = scores.shape
    for i in range(rows):
        row, v, c = scores[i], vals[i], cols[i]
        filled = 0
        j = 0
        while j < width:
            stop = j + 1
            if filled == k:
                worst = v[k - 1]
                stop = min(j + CHUNK, width)
                if worst == worst and not _any_above(row, j, stop, worst):
                    j = stop
                    continue
            while j < stop:
                x = row[j]
                if filled == k:
                    worst = v[k - 1]
                    # The hot test: most entries are not above the k-th best (and are not NaN).
                    if not (x > worst) and (x == x or worst != worst):
                        j += 1
                        continue
                    at = k - 1
                else:
                    at = filled
                    filled += 1
                while at > 0 and _better(x, v[at - 1]):
                    v[at] = v[at - 1]
                    c[at] = c[at - 1]
                    at -= 1
                v[at] = x
                c[at] = j
                j += 1


__all__ = ["row_top_k", "warm_up"]
