"""row_operators: closed forms against autograd through the operator modules and N3."""

import pytest
import torch

from pbg_core.model.operators import DYNAMIC_OPERATORS
from pbg_core.training.row_operators import ROW_OPERATORS, row_operator

NUM_RELS, DIM = 3, 8


def make_op(name: str, seed: int) -> torch.nn.Module:
    op = DYNAMIC_OPERATORS.get(name)(DIM, NUM_RELS)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in op.parameters():
            param.add_(0.5 * torch.randn(param.shape, generator=gen))
    return op


def autograd_reference(op: torch.nn.Module, x: torch.Tensor, rel: torch.Tensor, upstream: torch.Tensor, coef: float):
    """d/dx, d/dparams and d/ddst of <dst, upstream> + coef (|prep(dst)|^3 + |prep(x)|^3), and the N3 value."""
    x = x.detach().clone().requires_grad_()
    dst = op(x.reshape(-1, DIM), rel.reshape(-1))  # dynamic operators take flat rows
    dst.retain_grad()
    penalty = coef * (op.prepare_for_reg(dst).abs().pow(3).sum() + op.prepare_for_reg(x).abs().pow(3).sum())
    penalty = torch.as_tensor(penalty)
    ((dst * upstream.reshape(-1, DIM)).sum() + penalty).backward()
    grads = {name: p.grad.clone() for name, p in op.named_parameters()}
    op.zero_grad()
    return dst.detach().view(x.shape), x.grad, dst.grad.view(x.shape), grads, float(penalty.detach())


@pytest.mark.parametrize("name", ["none", "translation", "diagonal", "complex_diagonal"])
@pytest.mark.parametrize("coef", [0.0, 0.05])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # float64: no kernels
def test_closed_forms_match_autograd(name: str, coef: float, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    op, row_op = make_op(name, 2), row_operator(make_op(name, 2))
    assert row_op is ROW_OPERATORS.get(name)
    if dtype is torch.float64:
        op = op.double()
    rel = torch.randint(NUM_RELS, (4, 5), generator=gen)
    upstream = torch.randn(4, 5, DIM, generator=gen, dtype=dtype)
    rows = torch.randn(4, 7, DIM, generator=gen, dtype=dtype)  # per chunk: 5 positives, 2 negatives
    want_dst, want_x, want_ddst, want_params, want_penalty = autograd_reference(op, rows[:, :5], rel, upstream, coef)

    dst = row_op.forward(op, rows, rel, torch.empty(upstream.shape, dtype=dtype))
    torch.testing.assert_close(dst, want_dst)
    grad_dst, grad_rows = upstream.clone(), torch.zeros(rows.shape, dtype=dtype)
    penalty, param_grads = row_op.backward(op, rows, rel, dst, grad_dst, grad_rows, coef)
    torch.testing.assert_close(grad_dst, want_ddst)
    torch.testing.assert_close(grad_rows[:, :5], want_x)
    assert not grad_rows[:, 5:].any()  # the negatives' rows are not the operator's
    assert float(penalty) == pytest.approx(want_penalty, rel=1e-5)
    names = {id(p): n for n, p in op.named_parameters()}
    assert {names[id(p)] for p, _ in param_grads} == set(want_params)
    for param, grad in param_grads:
        torch.testing.assert_close(grad, want_params[names[id(param)]])


@pytest.mark.parametrize("name", ["none", "translation", "diagonal", "complex_diagonal"])
def test_parameter_penalty_matches_the_regularizer(name: str) -> None:
    op, rows = make_op(name, 3), ROW_OPERATORS.get(name)
    rel = torch.tensor([0, 2, 2, 1, 2])
    reg_params = op.reg_params(rel)
    want = 0.1 * reg_params.abs().pow(3).sum() if reg_params is not None else torch.tensor(0.0)
    if reg_params is not None:
        want.backward()
    counts = torch.bincount(rel, minlength=NUM_RELS).float()
    value, grads = rows.n3_params(op, counts, 0.1)
    assert float(value) == pytest.approx(float(want.detach()), rel=1e-5)
    for param, grad in grads:
        torch.testing.assert_close(grad, param.grad)


def test_linear_and_affine_are_not_row_wise() -> None:
    assert row_operator(DYNAMIC_OPERATORS.get("linear")(DIM, NUM_RELS)) is None
    assert row_operator(DYNAMIC_OPERATORS.get("affine")(DIM, NUM_RELS)) is None
