"""pbg_core.training.loss_grads: closed-form loss gradients against autograd of the loss modules."""

from __future__ import annotations

import pytest
import torch

from pbg_core.model.losses import LogisticLoss, LossFunction, RankingLoss, SoftmaxLoss
from pbg_core.training.loss_grads import loss_grads, ranking_grads


def _scores(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    pos = torch.randn(2, 3, generator=gen).to(dtype)
    neg = torch.randn(2, 3, 5, generator=gen).to(dtype)
    weights = torch.rand(2, 3, generator=gen).to(dtype) + 0.5
    return pos, neg, weights


def _autograd(loss_fn: LossFunction, pos: torch.Tensor, neg: torch.Tensor, weights: torch.Tensor) -> tuple:
    p, n = pos.clone().requires_grad_(), neg.clone().requires_grad_()
    loss = loss_fn(p.reshape(-1), n.reshape(-1, neg.shape[-1]), weights.reshape(-1))
    loss.backward()
    return loss.detach(), p.grad, n.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # the fused kernels, then torch ops
@pytest.mark.parametrize("loss_fn", [RankingLoss(0.3), LogisticLoss(), SoftmaxLoss()], ids=type)
def test_loss_and_gradients_match_autograd(loss_fn: LossFunction, dtype: torch.dtype) -> None:
    pos, neg, weights = _scores(0, dtype)
    want_loss, want_pos, want_neg = _autograd(loss_fn, pos, neg, weights)
    violators = int((neg > pos.unsqueeze(-1)).sum())
    got = loss_grads(loss_fn, pos, neg.clone(), weights, tag="-test")
    tol = {"rtol": 1e-5, "atol": 1e-6}
    assert torch.allclose(got.loss.to(dtype), want_loss, **tol)
    assert torch.allclose(got.grad_pos, want_pos, **tol)
    assert got.grad_neg is not None and torch.allclose(got.grad_neg, want_neg, **tol)
    assert int(got.violators) == violators
    if isinstance(loss_fn, RankingLoss):
        assert got.active is not None and int(got.active) == int((want_neg != 0).sum())


def test_without_negatives_only_logistic_has_a_loss() -> None:
    pos = torch.tensor([[0.5, -1.0]])
    logistic = loss_grads(LogisticLoss(), pos, None, 2.0)
    assert torch.allclose(logistic.loss, 2.0 * torch.nn.functional.softplus(-pos).sum())
    assert torch.allclose(logistic.grad_pos, -2.0 * torch.sigmoid(-pos))
    for loss_fn in (RankingLoss(0.1), SoftmaxLoss()):
        none = loss_grads(loss_fn, pos, None, 2.0)
        assert float(none.loss) == 0.0 and not none.grad_pos.any() and none.grad_neg is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ranking_grads_of_two_sides_at_once_equal_each_side_alone(dtype: torch.dtype) -> None:
    pos, neg, _ = _scores(1, dtype)
    other = torch.flip(neg, dims=[2]) * 0.5
    both = ranking_grads(RankingLoss(0.2), pos, torch.stack([neg, other]), 1.5, tag="-both")
    both = [(s.loss.clone(), s.grad_pos.clone(), s.grad_neg.clone()) for s in both]
    for side, scores in enumerate((neg, other)):
        alone = ranking_grads(RankingLoss(0.2), pos, scores.clone().unsqueeze(0), 1.5, tag="-alone")[0]
        assert torch.allclose(both[side][0].to(dtype), alone.loss.to(dtype))
        assert torch.equal(both[side][1], alone.grad_pos)
        assert torch.equal(both[side][2], alone.grad_neg)  # never None here
