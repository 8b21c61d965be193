"""Fused CPU loops (numba) for the dynamic ``complex_diagonal`` operator on a batch's rows.

:mod:`pbg_core.training.row_operators` applies each edge's relation to its positive rows; as torch
ops that is a gather of each edge's parameters and ~10 passes forward, ~20 backward with
N3. Here :func:`complex_forward_` reads the parameters in place, and
:func:`complex_backward_` does the operator's backward, the per-relation parameter
gradients (summed in order: deterministic) and N3 of its input and output in one pass:
0.04 ms and 0.13 ms for 1000 rows of dimension 200.

Same conventions as :mod:`pbg_core.kernels.fused` (fast-math without ``nnan``/``ninf``,
compiled code cached next to this file; callers check :func:`pbg_core.kernels.fused.accepts`).
"""

from __future__ import annotations

import numba
import numpy as np

from pbg_core.kernels.fused import FAST_MATH
from pbg_core.types import FloatTensorType, LongTensorType


def complex_forward_(
    x: FloatTensorType, rel: LongTensorType, real: FloatTensorType, imag: FloatTensorType, out: FloatTensorType
) -> None:
    """``out = x[:, :B] * (real[rel] + i imag[rel])`` on the halves of the rows, ``B = rel.shape[1]``.

    Args:
        x: [C, N, D] rows per chunk; the first B of each chunk are transformed.
        rel: [C, B] each row's relation.
        real: [N, D/2] real parts of the relation parameters.
        imag: [N, D/2] imaginary parts.
        out: [C, B, D] output.
    """
    _complex_forward(x.numpy(), rel.numpy(), real.numpy(), imag.numpy(), out.numpy())


def complex_backward_(
    x: FloatTensorType,
    rel: LongTensorType,
    real: FloatTensorType,
    imag: FloatTensorType,
    dst: FloatTensorType,
    grad_dst: FloatTensorType,
    grad_x: FloatTensorType,
    grad_real: FloatTensorType,
    grad_imag: FloatTensorType,
    coef: float,
) -> float:
    """Backward of :func:`complex_forward_`, fused with N3 of ``x`` and ``dst``.

    Adds ``3 coef m (a, b)`` (N3 of the moduli ``m`` of ``dst``) into ``grad_dst``, then
    the operator's gradient w.r.t. the rows plus N3 of the rows into ``grad_x``, and the
    per-relation parameter gradients into ``grad_real`` / ``grad_imag`` [N, D/2].

    Args:
        x: [C, N, D] rows per chunk; the first B = ``rel.shape[1]`` were transformed.
        rel: [C, B] each row's relation.
        real: [N, D/2] real parts of the relation parameters.
        imag: [N, D/2] imaginary parts.
        dst: [C, B, D] the forward output.
        grad_dst: [C, B, D] the loss gradient w.r.t. ``dst`` (N3 added in place).
        grad_x: [C, N, D] accumulates the gradient w.r.t. the first B rows of each chunk of ``x``.
        grad_real: [N, D/2] accumulates the gradient of ``real``.
        grad_imag: [N, D/2] accumulates the gradient of ``imag``.
        coef: N3 weight (0: no N3 work).

    Returns:
        ``coef * (sum m(x)^3 + sum m(dst)^3)``.
    """
    return float(
        _complex_backward(
            x.numpy(),
            rel.numpy(),
            real.numpy(),
            imag.numpy(),
            dst.numpy(),
            grad_dst.numpy(),
            grad_x.numpy(),
            grad_real.numpy(),
            grad_imag.numpy(),
            np.float32(coef),
        )
    )


def warm_up() -> None:
    """Call both kernels once on tiny inputs (see :func:`pbg_core.kernels.fused.warm_up`)."""
    rows, rel, params = np.zeros((1, 2, 4), np.float32), np.zeros((1, 1), np.int64), np.zeros((1, 2), np.float32)
    out = np.zeros((1, 1, 4), np.float32)
    _complex_forward(rows, rel, params, params, out)
    _complex_backward(
        rows, rel, params, params, out, out.copy(), rows.copy(), params.copy(), params.copy(), np.float32(1e-3)
    )


@numba.njit(nogil=True, cache=True, fastmath=FAST_MATH)
def _complex_forward(x, rel, real, imag, out):  # type: ignore[no-untyped-def]  # pragma: no cover
    chunks, rows, dim = rel.shape[0], rel.shape[1], x.shape[2]
    half = dim // 2
    for c in range(chunks):
        for b in range(rows):
            r = rel[c, b]
            for k in range(half):
                a, bb, re, im = x[c, b, k], x[c, b, half + k], real[r, k], imag[r, k]
                out[c, b, k] = a * re - bb * im
                out[c, b, half + k] = a * im + bb * re


@numba.njit(nogil=True, cache=True, fastmath=FAST_MATH)
def _complex_backward(  # type: ignore[no-untyped-def]  # pragma: no cover
    x, rel, real, imag, dst, grad_dst, grad_x, grad_real, grad_imag, coef
):
    chunks, rows, dim = rel.shape[0], rel.shape[1], x.shape[2]
    half = dim // 2
    three = np.float32(3.0) * coef
    penalty = 0.0
    for c in range(chunks):
        for b in range(rows):
            r = rel[c, b]
            cubes = np.float32(0.0)
            for k in range(half):
                a, bb, re, im = x[c, b, k], x[c, b, half + k], real[r, k], imag[r, k]
                g1, g2 = grad_dst[c, b, k], grad_dst[c, b, half + k]
                ga, gb = np.float32(0.0), np.float32(0.0)
                if coef != 0:
                    da, db = dst[c, b, k], dst[c, b, half + k]
                    m_dst = np.sqrt(da * da + db * db)
                    m_x = np.sqrt(a * a + bb * bb)
                    cubes += m_dst * m_dst * m_dst + m_x * m_x * m_x
                    g1 += three * m_dst * da
                    g2 += three * m_dst * db
                    grad_dst[c, b, k] = g1
                    grad_dst[c, b, half + k] = g2
                    ga = three * m_x * a
                    gb = three * m_x * bb
                grad_x[c, b, k] += ga + g1 * re + g2 * im
                grad_x[c, b, half + k] += gb + g2 * re - g1 * im
                grad_real[r, k] += g1 * a + g2 * bb
                grad_imag[r, k] += g2 * a - g1 * bb
            penalty += float(cubes)  # float64 sum, as before (mypy: a float32 added to a float)
    return penalty * coef
