"""Losses: hand-computed values (SUM reduction, weights), masked negatives, gradients."""

import math

import pytest
import torch

from pbg_core.model.losses import LOSS_FUNCTIONS, build_loss

POS = torch.tensor([1.0, 0.0])
NEG = torch.tensor([[0.5, 2.0], [-1.0, 0.05]])


def sp(x: float) -> float:
    return math.log1p(math.exp(x))


def test_ranking() -> None:
    # margin 0.1: max(0, 0.1 - s + t)
    want = (0 + 1.1) + (0 + 0.15)
    assert float(build_loss("ranking", margin=0.1)(POS, NEG)) == pytest.approx(want)
    w = torch.tensor([2.0, 10.0])
    assert float(build_loss("ranking", margin=0.1)(POS, NEG, w)) == pytest.approx(2 * 1.1 + 10 * 0.15)
    assert float(build_loss("ranking")(POS, NEG[:, :0])) == 0.0


def test_ranking_tie_at_the_hinge_passes_the_gradient_as_pbg() -> None:
    """PBG's F.margin_ranking_loss clamps with clamp_min, whose gradient is 1 at exactly 0."""
    pos = torch.tensor([1.0, 2.0], requires_grad=True)
    neg = torch.tensor([[0.5, 1.0], [2.0, 1.5]], requires_grad=True)  # (t - s) + 0.5: 0, 0.5, 0.5, 0
    loss = build_loss("ranking", margin=0.5)(pos, neg)
    loss.backward()
    assert loss.item() == 1.0
    assert neg.grad.tolist() == [[1.0, 1.0], [1.0, 1.0]]  # relu would give 0 at both ties
    assert pos.grad.tolist() == [-2.0, -2.0]


def test_logistic_renormalises_negatives() -> None:
    want = sp(-1.0) + (sp(0.5) + sp(2.0)) / 2 + sp(0.0) + (sp(-1.0) + sp(0.05)) / 2
    assert float(build_loss("logistic")(POS, NEG)) == pytest.approx(want, rel=1e-6)


def test_softmax_includes_positive_in_denominator() -> None:
    def row(s: float, ts: list[float]) -> float:
        return -s + math.log(math.exp(s) + sum(math.exp(t) for t in ts))

    want = row(1.0, [0.5, 2.0]) + row(0.0, [-1.0, 0.05])
    assert float(build_loss("softmax")(POS, NEG)) == pytest.approx(want, rel=1e-6)
    w = torch.tensor([0.0, 3.0])
    assert float(build_loss("softmax")(POS, NEG, w)) == pytest.approx(3 * row(0.0, [-1.0, 0.05]), rel=1e-6)


@pytest.mark.parametrize("name", ["ranking", "logistic", "softmax"])
@pytest.mark.parametrize("masked", [-1e9, float("-inf")])
def test_masked_negatives_contribute_zero_and_no_nan(name: str, masked: float) -> None:
    loss = build_loss(name)
    pos = POS.clone().requires_grad_()
    neg = NEG.clone()
    neg[0, 1] = masked
    neg_all = torch.full((2, 2), masked, requires_grad=True)
    value = loss(pos, neg.requires_grad_())
    # A masked negative adds nothing; logistic still divides by N = 2 (PBG).
    if name == "logistic":
        want = sp(-1.0) + sp(0.5) / 2 + float(loss(POS[1:], NEG[1:]))
    else:
        want = float(loss(POS[:1], NEG[:1, :1])) + float(loss(POS[1:], NEG[1:]))
    assert float(value.detach()) == pytest.approx(want, rel=1e-6)
    value.backward()
    assert torch.isfinite(pos.grad).all()
    out = loss(POS.clone().requires_grad_(), neg_all)
    out.backward()
    assert torch.isfinite(out) and torch.isfinite(neg_all.grad).all()
    assert float(neg_all.grad.abs().sum()) == 0.0


@pytest.mark.parametrize("name", ["ranking", "logistic", "softmax"])
def test_gradcheck(name: str) -> None:
    torch.manual_seed(0)
    pos = torch.randn(3, dtype=torch.double, requires_grad=True)
    neg = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    w = torch.rand(3, dtype=torch.double) + 0.5
    assert torch.autograd.gradcheck(lambda p, n: build_loss(name, margin=0.3)(p, n, w), (pos, neg))


def test_registry_names() -> None:
    assert LOSS_FUNCTIONS.names() == ["logistic", "ranking", "softmax"]


@pytest.mark.parametrize("weighted", [False, True])
def test_softmax_without_gradient_equals_the_autograd_formula(weighted: bool) -> None:
    """Evaluation takes the fused kernel (no gradient wanted); training the torch ops."""
    gen = torch.Generator().manual_seed(11)
    pos, neg = torch.randn(200, generator=gen) * 3, torch.randn(200, 300, generator=gen) * 3
    neg[torch.rand(200, 300, generator=gen) < 0.05] = -1e9
    neg[torch.rand(200, 300, generator=gen) < 0.05] = float("-inf")
    neg[3] = float("-inf")  # a row with every negative masked
    weight = torch.rand(200, generator=gen) if weighted else None
    loss = build_loss("softmax")
    with_grad = loss(pos.clone().requires_grad_(), neg, weight)  # the torch formula
    before = neg.clone()
    with torch.no_grad():
        fused = loss(pos, neg, weight)
    assert float(fused) == pytest.approx(float(with_grad.detach()), rel=1e-5)
    assert torch.equal(neg, before)  # scores are left as they were (evaluation ranks them next)
    neg[5, 7] = float("nan")
    with torch.no_grad():
        assert math.isnan(float(loss(pos, neg, weight)))
