"""Fused CPU loops (numba) for the memory-bound steps of a training batch.

Written as torch ops, each of these steps is a chain of 8-15 whole-array passes (and
as many dispatches); as one loop each it reads and writes every element once:

- :func:`row_adagrad_` is :class:`~pbg_core.training.optimizers.RowAdagrad`'s step: fold the
  gradients of repeated rows into their first copy, then per distinct row
  ``G += mean(g^2)`` and ``row -= lr * g / (sqrt(G) + eps)``, in one pass over the
  gradient rows. Measured at config A sizes (4,000 power-law rows of dim 100, one
  thread): 0.23 ms instead of 0.57 ms.
- :func:`ranking_grads_` is the ranking loss of the fast path: hinge, its gradient
  (written over the scores), per-positive counts, the loss, violators and active pairs
  of one or both sides: 0.09 ms instead of 0.26 ms for ``[2, 20, 50, 100]`` scores.
- :func:`softmax_grads_` is the softmax loss of one side: max, violators, exp, the
  loss and the gradient (written over the scores) in three passes over each row, with
  a vectorisable ``exp`` (Cephes' ``expf`` polynomial, within 1-2 ulp of torch's):
  0.20 ms instead of 0.52 ms for ``[20, 50, 150]`` scores.

- :func:`softmax_loss` is the softmax loss's value alone (evaluation: no gradient), the
  scores left as they are: one pass to copy and clamp each row, the same ``exp``.
- :func:`ranks_` is evaluation's rank of each positive among its negatives, ``-inf``
  masked and NaN counted pessimistically, in one pass over the scores instead of seven
  (2M scores of held-out evaluation, one thread: ~2 ms instead of ~9 ms).

They match the torch formulation up to float rounding (``reassoc``), and
are deterministic (sequential loops). They never assume finite values (no ``nnan`` /
``ninf`` fast-math flags): a NaN score still makes the loss NaN, which stops the run.
Compiled code is cached next to this file (``cache=True``), so worker processes load
it instead of compiling it again. Callers check :func:`accepts` first and keep their
torch version for anything else (other dtypes, non-contiguous tensors).
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from pbg_core.types import FloatTensorType, LongTensorType

# Reassociation lets the sums vectorise; no nnan/ninf, so NaN and inf propagate.
FAST_MATH = {"reassoc", "contract", "arcp"}


def accepts(floats: tuple[torch.Tensor, ...], longs: tuple[torch.Tensor, ...] = ()) -> bool:
    """Whether the kernels can take these tensors: contiguous float32 (``floats``) and int64 (``longs``) on the CPU."""
    wanted = [(t, torch.float32) for t in floats] + [(t, torch.int64) for t in longs]
    return all(t.dtype == dtype and t.device.type == "cpu" and t.is_contiguous() for t, dtype in wanted)


def row_adagrad_(
    table: FloatTensorType,
    state: FloatTensorType,
    indices: LongTensorType,
    grads: FloatTensorType,
    slots: LongTensorType,
    lr: float,
    eps: float,
) -> None:
    """Row-wise Adagrad of ``grads`` [n, D] on rows ``indices`` (repeats summed first), in place.

    Args:
        table: Embedding table [count, D] (float32, contiguous), updated in place.
        state: Its accumulator [count], updated in place.
        indices: Row of each gradient (int64) [n].
        grads: Gradients [n, D], overwritten (repeats are folded into the first copy).
        slots: Scratch of at least ``count`` int64; contents do not matter.
        lr: Learning rate.
        eps: Added to ``sqrt(G)``.
    """
    _row_adagrad(table.numpy(), state.numpy(), indices.numpy(), grads.numpy(), slots.numpy(), lr, eps)


def ranks_(pos: FloatTensorType, neg: FloatTensorType) -> LongTensorType:
    """``1 + #(unmasked negatives >= pos)`` per row of ``neg`` [N, M] (see :func:`pbg_core.evaluation.metrics.ranks_from_scores`)."""
    out = torch.empty(pos.shape[0], dtype=torch.int64)
    _ranks(pos.numpy(), neg.numpy(), out.numpy())
    return out


def softmax_loss(pos: FloatTensorType, neg: FloatTensorType, weight: FloatTensorType | None) -> float:
    """``sum_i w_i (logaddexp(pos_i, logsumexp(max(neg_i, -1e9))) - pos_i)`` of ``pos`` [N], ``neg`` [N, M].

    NaN if any score is NaN; ``neg`` is not changed.
    """
    w = weight.numpy() if weight is not None else np.ones(pos.shape[0], dtype=np.float32)
    return float(_softmax_loss(pos.numpy(), neg.numpy(), w))


def ranking_grads_(
    negs: FloatTensorType, pos: FloatTensorType, scale: FloatTensorType, margin: float, grad_pos: FloatTensorType
) -> np.ndarray:
    """Ranking loss of ``S`` sides' negatives at once; ``negs`` becomes the loss gradient.

    Per side ``s``, positive ``(c, b)`` and negative ``n`` the hinge is
    ``h = max(0, (negs[s, c, b, n] - pos[c, b]) + margin)``; its gradient w.r.t. the
    negative's score is ``scale[c, b]`` where ``h >= 0`` (PBG's ``clamp_min``: a pair
    exactly at the hinge is active) else 0, and w.r.t. the positive's score minus the sum
    of those.

    Args:
        negs: [S, C, B, N] masked negative scores, overwritten by their gradients.
        pos: [C, B] positive scores.
        scale: [C, B] relation weight times edge weight.
        margin: The ranking margin.
        grad_pos: [S, C, B] output: the positives' score gradients per side.

    Returns:
        ``[S, 3]`` float64: per side the scaled loss, the number of negatives scoring
        above their positive, and the number of active (nonzero-gradient) pairs.
    """
    out = np.zeros((negs.shape[0], 3), dtype=np.float64)
    _ranking(negs.numpy(), pos.numpy(), scale.numpy(), margin, grad_pos.numpy(), out)
    return out


def softmax_grads_(
    negs: FloatTensorType, pos: FloatTensorType, scale: FloatTensorType, grad_pos: FloatTensorType
) -> np.ndarray:
    """Softmax loss of one side's scores; ``negs`` becomes the loss gradient.

    Per positive ``(c, b)`` with ``lse = logsumexp(negs[c, b])``: the loss
    ``scale * (logaddexp(pos, lse) - pos)``, the negatives' gradient
    ``exp(negs - lse) * p`` and the positive's ``-p`` with ``p = scale * sigmoid(lse - pos)``.
    Masked scores (-1e9) get exactly 0.

    Args:
        negs: [C, B, N] masked negative scores, overwritten by their gradients.
        pos: [C, B] positive scores.
        scale: [C, B] relation weight times edge weight.
        grad_pos: [C, B] output: the positives' score gradients.

    Returns:
        ``[2]`` float64: the scaled loss (NaN if any score is NaN) and the number of
        negatives scoring above their positive.
    """
    out = np.zeros(2, dtype=np.float64)
    _softmax(negs.numpy(), pos.numpy(), scale.numpy(), grad_pos.numpy(), out)
    return out


def warm_up() -> None:
    """Call every kernel once on tiny inputs: loads their cached machine code.

    The first call of any numba kernel in a process costs ~0.3 s (numba's own start-up,
    then ~3 ms per kernel); done here it need not land in a bucket's first batch.
    """
    table, state, grads = np.zeros((4, 2), np.float32), np.zeros(4, np.float32), np.zeros((2, 2), np.float32)
    _row_adagrad(table, state, np.array([1, 1]), grads, np.zeros(4, np.int64), 0.1, 1e-10)
    negs, pos, scale = np.zeros((1, 1, 2, 3), np.float32), np.zeros((1, 2), np.float32), np.ones((1, 2), np.float32)
    _ranking(negs, pos, scale, 0.1, np.zeros((1, 1, 2), np.float32), np.zeros((1, 3)))
    _softmax(negs[0], pos, scale, np.zeros((1, 2), np.float32), np.zeros(2))
    _softmax_loss(pos[0], negs[0, 0], scale[0])
    _ranks(pos[0], negs[0, 0], np.zeros(2, np.int64))


# Cephes expf: exp(x) = 2^k p(r), x = k ln2 + r, |r| <= ln2 / 2 (ln2 split in two for accuracy).
_LOG2E = np.float32(1.4426950408889634)
_LN2_HI, _LN2_LO = np.float32(0.693359375), np.float32(-2.12194440e-4)
_EXP_MIN = np.float32(-87.33654)  # below this exp(x) < 2^-126: taken as 0 (the sum it joins is >= 1)


@numba.njit(nogil=True, cache=True, fastmath=FAST_MATH)
def _exp_shifted(row, shift, kbits, pow2):  # type: ignore[no-untyped-def]  # pragma: no cover
    """``row = exp(row - shift)`` in place for ``row <= shift``; returns the sum.

    libm's ``expf`` is one call per element; this polynomial vectorises. ``2^k`` is
    built in the exponent bits of ``kbits``, read back through its float view ``pow2``.
    """
    size = row.shape[0]
    for n in range(size):
        x = row[n] - shift
        clamped = x if x > _EXP_MIN else _EXP_MIN
        k = np.floor(clamped * _LOG2E + np.float32(0.5))
        r = clamped - k * _LN2_HI - k * _LN2_LO
        p = np.float32(1.9875691500e-4)
        p = p * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        p = p * r * r + r + np.float32(1.0)
        row[n] = p if x >= _EXP_MIN else np.float32(0.0)
        kbits[n] = (np.int32(k) + np.int32(127)) << np.int32(23)
    total = np.float32(0.0)
    for n in range(size):
        e = row[n] * pow2[n]
        row[n] = e
        total += e
    return total


@numba.njit(nogil=True, cache=True, fastmath=FAST_MATH)
def _softmax(negs, pos, scale, grad_pos, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    chunks, per_chunk, num_neg = negs.shape
    kbits = np.empty(num_neg, np.int32)
    pow2 = kbits.view(np.float32)
    loss, violators, saw_nan = 0.0, 0, False
    for c in range(chunks):
        for b in range(per_chunk):
            p = pos[c, b]
            row = negs[c, b]
            top = row[0]
            for n in range(num_neg):
                v = row[n]
                top = v if v > top else top
                violators += v > p
                saw_nan |= v != v  # the exp below would drop a NaN: the loss keeps it
            total = _exp_shifted(row, top, kbits, pow2)
            # d = lse - pos; the loss term is softplus(d), the negatives' mass sigmoid(d).
            d = top + np.log(total) - p
            u = np.exp(-abs(d))
            softplus = max(d, np.float32(0.0)) + np.log1p(u)
            mass = (np.float32(1.0) if d >= 0 else u) / (np.float32(1.0) + u) * scale[c, b]
            loss += softplus * scale[c, b]
            factor = mass / total
            for n in range(num_neg):
                row[n] *= factor
            grad_pos[c, b] = -mass
    out[0] = np.nan if saw_nan else loss
    out[1] = violators


@numba.njit(nogil=True, cache=True, fastmath=FAST_MATH)
def _row_adagrad(table, state, indices, grads, slots, lr, eps):  # type: ignore[no-untyped-def]  # pragma: no cover
    n, dim = grads.shape
    for i in range(n):
        slots[indices[i]] = -1
    for i in range(n):  # fold repeats into the first copy, in order (deterministic)
        first = slots[indices[i]]
        if first == -1:
            slots[indices[i]] = i
        else:
            for k in range(dim):
                grads[first, k] += grads[i, k]
    inv_dim = np.float32(1.0 / dim)
    for i in range(n):
        row = indices[i]
        if slots[row] != i:
            continue
        total = np.float32(0.0)
        for k in range(dim):
            total += grads[i, k] * grads[i, k]
        # "Local G": this worker's own contribution is in the denominator even if a
        # racing worker overwrites the shared accumulator.
        local = state[row] + total * inv_dim
        state[row] = local
        step = np.float32(-lr) / (np.sqrt(local) + np.float32(eps))
        for k in range(dim):
            table[row, k] += grads[i, k] * step


@numba.njit(nogil=True, cache=True, fastmath=FAST_MATH)
def _softmax_loss(pos, neg, weight):  # type: ignore[no-untyped-def]  # pragma: no cover
    rows, cols = neg.shape
    row = np.empty(cols, np.float32)
    kbits = np.empty(cols, np.int32)
    pow2 = kbits.view(np.float32)
    floor = np.float32(-1e9)  # masked scores (-1e9, -inf) add exactly 0, as the torch loss
    loss, saw_nan = 0.0, False
    for i in range(rows):
        p = pos[i]
        saw_nan |= p != p
        top = floor
        for j in range(cols):
            v = neg[i, j]
            saw_nan |= v != v
            v = v if v > floor else floor
            row[j] = v
            top = v if v > top else top
        total = _exp_shifted(row, top, kbits, pow2)
        d = top + np.log(total) - p  # the term is softplus(lse - pos)
        loss += (max(d, np.float32(0.0)) + np.log1p(np.exp(-abs(d)))) * weight[i]
    return np.nan if saw_nan else loss


@numba.njit(nogil=True, cache=True)
def _ranks(pos, neg, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    rows, cols = neg.shape
    for i in range(rows):
        p = pos[i]
        worst = np.isnan(p)  # a NaN positive is beaten by every unmasked negative
        count = 0
        for j in range(cols):
            v = neg[i, j]
            if v == -np.inf:  # masked: never counts
                continue
            if worst or not v < p:  # v >= p, or v is NaN
                count += 1
        out[i] = count + 1


@numba.njit(nogil=True, cache=True, fastmath=FAST_MATH)
def _ranking(negs, pos, scale, margin, grad_pos, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    sides, chunks, per_chunk, num_neg = negs.shape
    for s in range(sides):
        loss, violators, active = 0.0, 0, 0
        for c in range(chunks):
            for b in range(per_chunk):
                p = pos[c, b]
                w = scale[c, b]
                m = np.float32(margin)
                hinge_sum = np.float32(0.0)
                count = 0
                saw_nan = False
                # Branch-free body (selects, not jumps): about half the pairs are active
                # early in training, and mispredicted branches made this loop 4x slower.
                for n in range(num_neg):
                    v = negs[s, c, b, n]
                    violators += v > p
                    h = (v - p) + m
                    active_pair = h >= 0
                    hinge_sum += h if active_pair else np.float32(0.0)
                    saw_nan |= h != h  # torch's clamp keeps a NaN: so does the loss
                    count += active_pair
                    negs[s, c, b, n] = w if active_pair else np.float32(0.0)
                if saw_nan:
                    hinge_sum = np.float32(np.nan)
                loss += hinge_sum * w
                active += count
                grad_pos[s, c, b] = -count * w
        out[s, 0] = loss
        out[s, 1] = violators
        out[s, 2] = active
