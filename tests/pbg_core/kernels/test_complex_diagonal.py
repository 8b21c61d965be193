"""The fused complex-diagonal kernels against a plain torch computation and its autograd."""

import pytest
import torch

from pbg_core.kernels import complex_diagonal


def _inputs(seed: int) -> tuple[torch.Tensor, ...]:
    """Chunks of 5 rows of dimension 6, the first 3 transformed, 4 relations (repeated on purpose)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 6, generator=gen)
    rel = torch.tensor([[0, 2, 2], [3, 0, 2]])
    real, imag = torch.randn(4, 3, generator=gen), torch.randn(4, 3, generator=gen)
    return x, rel, real, imag


def _reference_forward(x: torch.Tensor, rel: torch.Tensor, real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
    """``(a + ib)(re + i im)`` on the halves of the first ``B`` rows of each chunk."""
    rows = x[:, : rel.shape[1]]
    half = x.shape[2] // 2
    a, b = rows[..., :half], rows[..., half:]
    re, im = real[rel], imag[rel]
    return torch.cat([a * re - b * im, a * im + b * re], dim=-1)


def _moduli_cubed(t: torch.Tensor) -> torch.Tensor:
    half = t.shape[-1] // 2
    return (t[..., :half].pow(2) + t[..., half:].pow(2)).sqrt().pow(3).sum()


def test_forward_matches_the_complex_product() -> None:
    x, rel, real, imag = _inputs(0)
    out = torch.full((2, 3, 6), float("nan"))
    complex_diagonal.complex_forward_(x, rel, real, imag, out)
    assert torch.allclose(out, _reference_forward(x, rel, real, imag), atol=1e-6)


@pytest.mark.parametrize("coef", [0.0, 0.01])
def test_backward_matches_autograd_with_n3(coef: float) -> None:
    """Gradients of ``<dst, G> + coef (sum m(x)^3 + sum m(dst)^3)`` w.r.t. rows, parameters and ``dst``."""
    x, rel, real, imag = _inputs(1)
    grad_out = torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(2))
    leaves = [t.clone().requires_grad_() for t in (x, real, imag)]
    dst = _reference_forward(*leaves[:1], rel, *leaves[1:])
    dst.retain_grad()
    penalty = coef * (_moduli_cubed(leaves[0][:, : rel.shape[1]]) + _moduli_cubed(dst))
    ((dst * grad_out).sum() + penalty).backward()

    out = torch.empty(2, 3, 6)
    complex_diagonal.complex_forward_(x, rel, real, imag, out)
    grad_dst, grad_x = grad_out.clone(), torch.zeros_like(x)
    grad_real, grad_imag = torch.zeros_like(real), torch.zeros_like(imag)
    got = complex_diagonal.complex_backward_(x, rel, real, imag, out, grad_dst, grad_x, grad_real, grad_imag, coef)

    assert got == pytest.approx(penalty.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(grad_dst, dst.grad, atol=1e-5)  # retained above
    assert torch.allclose(grad_x, leaves[0].grad, atol=1e-5)  # rows past B: 0
    assert torch.allclose(grad_real, leaves[1].grad, atol=1e-5)
    assert torch.allclose(grad_imag, leaves[2].grad, atol=1e-5)
    assert not grad_real[1].any()  # relation 1 is used by no row


def test_backward_accumulates_into_existing_gradients() -> None:
    """The gradient outputs are added to, not overwritten: callers sum over several calls."""
    x, rel, real, imag = _inputs(3)
    out = torch.empty(2, 3, 6)
    complex_diagonal.complex_forward_(x, rel, real, imag, out)
    grads = [torch.zeros_like(x), torch.zeros_like(real), torch.zeros_like(imag)]
    complex_diagonal.complex_backward_(x, rel, real, imag, out, torch.ones(2, 3, 6), *grads, 0.0)
    once = [g.clone() for g in grads]
    complex_diagonal.complex_backward_(x, rel, real, imag, out, torch.ones(2, 3, 6), *grads, 0.0)
    assert all(torch.allclose(g, 2 * o) for g, o in zip(grads, once, strict=True))
