"""Closed-form forward, backward and N3 terms of the row-wise dynamic operators.

The hand-written dynamic-relations path (:mod:`pbg_core.training.fast_dynamic`) applies each
edge's relation operator to one embedding row and needs its gradient without autograd.
``ROW_OPERATORS`` holds, under the operator names of
:data:`pbg_core.model.operators.DYNAMIC_OPERATORS`, the operators whose map is row-wise
(``none``, ``translation``, ``diagonal``, ``complex_diagonal``); ``linear`` and
``affine`` are not here, so their batches keep the autograd path.

Rows come as a batch's chunk buffer ``rows`` [C, N, D] whose first ``B`` rows per
chunk are the positives (the rest are negatives), with their relations ``rel`` [C, B];
the operator applies to ``x = rows[:, :B]``. Each entry computes what the operator
module and :class:`~pbg_core.model.regularizers.N3Regularizer` compute, and the gradients
autograd would give, up to float rounding (tests compare them):

- ``forward(op, rows, rel, out)``: ``dst = op(x, rel)`` [C, B, D], written into ``out``
  (or ``x`` itself for ``none``);
- ``backward(op, rows, rel, dst, grad_dst, grad_rows, coef)``: first adds the gradient
  of ``coef * sum |prepare_for_reg(dst)|^3`` into ``grad_dst``, then adds into
  ``grad_rows[:, :B]`` the operator's gradient plus that of
  ``coef * sum |prepare_for_reg(x)|^3``; returns the two N3 values and every
  parameter's gradient (dense ``[N, ...]``, as autograd's);
- ``n3_params(op, counts, coef)``: the operator term ``coef * sum_edges |reg_params|^3``
  from the number of edges per relation, and its parameter gradients.

Where a complex modulus is 0 the closed-form N3 gradient is 0; autograd's ``sqrt``
gives NaN there (0 / 0), which would stop the run.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from pbg_core.kernels import complex_diagonal, fused
from pbg_core.model.operators import DYNAMIC_OPERATORS
from pbg_core.registry import Registry
from pbg_core.types import FloatTensorType, LongTensorType

ParamGrads = list[tuple[nn.Parameter, FloatTensorType]]


class IdentityRows:
    """``none``: x -> x; N3 cubes the rows themselves; no parameters."""

    def forward(
        self, op: nn.Module, rows: FloatTensorType, rel: LongTensorType, out: FloatTensorType
    ) -> FloatTensorType:
        return rows[:, : rel.shape[1]]

    def backward(
        self,
        op: nn.Module,
        rows: FloatTensorType,
        rel: LongTensorType,
        dst: FloatTensorType,
        grad_dst: FloatTensorType,
        grad_rows: FloatTensorType,
        coef: float,
    ) -> tuple[FloatTensorType, ParamGrads]:
        x, grad_x = rows[:, : rel.shape[1]], grad_rows[:, : rel.shape[1]]
        penalty = _n3(dst, coef, grad_dst) + _n3(x, coef, grad_x) if coef else grad_x.new_zeros(())
        return penalty, self.param_backward(op, x, rel, grad_dst, grad_x)

    def param_backward(
        self,
        op: nn.Module,
        x: FloatTensorType,
        rel: LongTensorType,
        grad_dst: FloatTensorType,
        grad_x: FloatTensorType,
    ) -> ParamGrads:
        """Add the operator's gradient w.r.t. ``x`` into ``grad_x``; the parameters' gradients."""
        grad_x.add_(grad_dst)
        return []

    def n3_params(self, op: nn.Module, counts: FloatTensorType, coef: float) -> tuple[FloatTensorType, ParamGrads]:
        return counts.new_zeros(()), []


class _VectorRows(IdentityRows):
    """Operators with one ``[N, D]`` parameter per relation, penalised as ``|p|^3``."""

    param_name = ""

    def param(self, op: nn.Module) -> nn.Parameter:
        return cast(nn.Parameter, getattr(op, self.param_name))

    def n3_params(self, op: nn.Module, counts: FloatTensorType, coef: float) -> tuple[FloatTensorType, ParamGrads]:
        p = self.param(op).detach()
        magnitude = p.abs()
        value = (magnitude.pow(3).sum(1) * counts).sum() * coef
        return value, [(self.param(op), p * magnitude * (counts.unsqueeze(1) * (3 * coef)))]


class TranslationRows(_VectorRows):
    """``translation``: x -> x + t[rel]."""

    param_name = "translations"

    def forward(
        self, op: nn.Module, rows: FloatTensorType, rel: LongTensorType, out: FloatTensorType
    ) -> FloatTensorType:
        return torch.add(rows[:, : rel.shape[1]], per_edge(self.param(op), rel), out=out)

    def param_backward(
        self,
        op: nn.Module,
        x: FloatTensorType,
        rel: LongTensorType,
        grad_dst: FloatTensorType,
        grad_x: FloatTensorType,
    ) -> ParamGrads:
        grad_x.add_(grad_dst)
        return [(self.param(op), per_relation(self.param(op), rel, grad_dst))]


class DiagonalRows(_VectorRows):
    """``diagonal``: x -> x * d[rel]."""

    param_name = "diagonals"

    def forward(
        self, op: nn.Module, rows: FloatTensorType, rel: LongTensorType, out: FloatTensorType
    ) -> FloatTensorType:
        return torch.mul(rows[:, : rel.shape[1]], per_edge(self.param(op), rel), out=out)

    def param_backward(
        self,
        op: nn.Module,
        x: FloatTensorType,
        rel: LongTensorType,
        grad_dst: FloatTensorType,
        grad_x: FloatTensorType,
    ) -> ParamGrads:
        param = self.param(op)
        grad_x.addcmul_(grad_dst, per_edge(param, rel))
        return [(param, per_relation(param, rel, grad_dst * x))]


class ComplexDiagonalRows:
    """``complex_diagonal``: (a + ib) -> (a + ib)(re[rel] + i im[rel]) on the rows' halves;
    N3 cubes complex moduli. Float32 rows take the fused loops of :mod:`pbg_core.kernels.fused`."""

    def forward(
        self, op: nn.Module, rows: FloatTensorType, rel: LongTensorType, out: FloatTensorType
    ) -> FloatTensorType:
        op_real, op_imag = _complex_params(op)
        real, imag = op_real.detach(), op_imag.detach()
        if rows.dim() == 3 and fused.accepts((rows, out, real, imag), (rel,)):
            complex_diagonal.complex_forward_(rows, rel, real, imag, out)
            return out
        x = rows[:, : rel.shape[1]]
        re, im = per_edge(op_real, rel), per_edge(op_imag, rel)
        a, b = _halves(x)
        out_a, out_b = _halves(out)
        torch.mul(a, re, out=out_a).addcmul_(b, im, value=-1)
        torch.mul(a, im, out=out_b).addcmul_(b, re)
        return out

    def backward(
        self,
        op: nn.Module,
        rows: FloatTensorType,
        rel: LongTensorType,
        dst: FloatTensorType,
        grad_dst: FloatTensorType,
        grad_rows: FloatTensorType,
        coef: float,
    ) -> tuple[FloatTensorType | float, ParamGrads]:
        op_real, op_imag = _complex_params(op)
        real, imag = op_real.detach(), op_imag.detach()
        if rows.dim() == 3 and fused.accepts((rows, dst, grad_dst, grad_rows, real, imag), (rel,)):
            grad_real, grad_imag = torch.zeros_like(real), torch.zeros_like(imag)
            penalty: FloatTensorType | float = complex_diagonal.complex_backward_(
                rows, rel, real, imag, dst, grad_dst, grad_rows, grad_real, grad_imag, coef
            )
            return penalty, [(op_real, grad_real), (op_imag, grad_imag)]
        x, grad_x = rows[:, : rel.shape[1]], grad_rows[:, : rel.shape[1]]
        penalty = _complex_n3(dst, coef, grad_dst) + _complex_n3(x, coef, grad_x) if coef else x.new_zeros(())
        re, im = per_edge(op_real, rel), per_edge(op_imag, rel)
        (a, b), (g1, g2), (ga, gb) = _halves(x), _halves(grad_dst), _halves(grad_x)
        ga.addcmul_(g1, re).addcmul_(g2, im)
        gb.addcmul_(g2, re).addcmul_(g1, im, value=-1)
        d_re = (g1 * a).addcmul_(g2, b)
        d_im = (g2 * a).addcmul_(g1, b, value=-1)
        return penalty, [(op_real, per_relation(op_real, rel, d_re)), (op_imag, per_relation(op_imag, rel, d_im))]

    def n3_params(self, op: nn.Module, counts: FloatTensorType, coef: float) -> tuple[FloatTensorType, ParamGrads]:
        op_real, op_imag = _complex_params(op)
        re, im = op_real.detach(), op_imag.detach()
        modulus = torch.sqrt(re * re + im * im)
        weights = modulus * counts.unsqueeze(1) * (3 * coef)
        value = (modulus.pow(3).sum(1) * counts).sum() * coef
        return value, [(op_real, re * weights), (op_imag, im * weights)]


def _n3(y: FloatTensorType, coef: float, grad_y: FloatTensorType) -> FloatTensorType:
    """``coef * sum |y|^3``; adds ``3 coef y |y|`` into ``grad_y``."""
    magnitude = y.abs()
    grad_y.addcmul_(y, magnitude, value=3 * coef)
    return magnitude.pow_(3).sum() * coef


def _complex_n3(y: FloatTensorType, coef: float, grad_y: FloatTensorType) -> FloatTensorType:
    """``coef * sum m^3`` over the complex moduli ``m`` of ``y``; adds ``3 coef m (a, b)`` into ``grad_y``."""
    (a, b), (ga, gb) = _halves(y), _halves(grad_y)
    modulus = torch.sqrt(a * a + b * b)
    scaled = modulus * (3 * coef)
    ga.addcmul_(a, scaled)
    gb.addcmul_(b, scaled)
    return modulus.pow_(3).sum() * coef


def per_edge(param: nn.Parameter, rel: LongTensorType) -> FloatTensorType:
    """Each edge's row of a relation parameter: ``param[rel]`` of shape ``[*rel.shape, D]``."""
    return param.detach().index_select(0, rel.reshape(-1)).view(*rel.shape, param.shape[-1])


def per_relation(param: nn.Parameter, rel: LongTensorType, per_edge_grads: FloatTensorType) -> FloatTensorType:
    """The dense gradient of ``param`` from per-edge gradients ``[*rel.shape, D]`` (summed per relation)."""
    rows = per_edge_grads.reshape(-1, per_edge_grads.shape[-1])
    return torch.zeros_like(param, memory_format=torch.contiguous_format).index_add_(0, rel.reshape(-1), rows)


def _halves(x: FloatTensorType) -> tuple[FloatTensorType, FloatTensorType]:
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


RowOperator = IdentityRows | ComplexDiagonalRows
ROW_OPERATORS: Registry[RowOperator] = Registry("row-wise dynamic operator")
ROW_OPERATORS.register("none")(IdentityRows())
ROW_OPERATORS.register("translation")(TranslationRows())
ROW_OPERATORS.register("diagonal")(DiagonalRows())
ROW_OPERATORS.register("complex_diagonal")(ComplexDiagonalRows())
_BY_TYPE = {DYNAMIC_OPERATORS.get(name): ROW_OPERATORS.get(name) for name in ROW_OPERATORS}


def row_operator(op: nn.Module) -> RowOperator | None:
    """The closed forms of dynamic operator ``op``, or None if it is not row-wise."""
    return _BY_TYPE.get(type(op))


def _complex_params(op: nn.Module) -> tuple[nn.Parameter, nn.Parameter]:
    """The ``real`` and ``imag`` parameters of a complex-diagonal operator (typed: ``nn.Module`` attributes are not)."""
    return cast(nn.Parameter, op.real), cast(nn.Parameter, op.imag)
