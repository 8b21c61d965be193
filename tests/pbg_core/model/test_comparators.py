"""Comparators: hand-computed scores; negatives agree with pairwise positives; bias."""

import math

import pytest
import torch

from pbg_core.model.comparators import COMPARATORS, build_comparator

A = torch.tensor([[1.0, 2.0], [0.0, 3.0]])
B = torch.tensor([[3.0, 4.0], [1.0, 1.0]])


def test_hand_computed_pos_scores() -> None:
    assert build_comparator("dot").pos_scores(A, B).tolist() == [11.0, 3.0]
    assert build_comparator("squared_l2").pos_scores(A, B).tolist() == [-8.0, -5.0]
    assert build_comparator("l2").pos_scores(A, B).tolist() == pytest.approx([-math.sqrt(8), -math.sqrt(5)])
    cos = build_comparator("cos")
    assert cos.pos_scores(cos.prepare(A), cos.prepare(B)).tolist() == pytest.approx(
        [11 / (math.sqrt(5) * 5), 3 / (3 * math.sqrt(2))]
    )


@pytest.mark.parametrize("name", ["dot", "cos", "l2", "squared_l2"])
@pytest.mark.parametrize("bias", [False, True])
def test_neg_scores_equal_all_pairs_of_pos_scores(name: str, bias: bool) -> None:
    torch.manual_seed(0)
    comp = build_comparator(name, bias)
    pos = comp.prepare(torch.randn(2, 3, 5))
    neg = comp.prepare(torch.randn(2, 4, 5))
    got = comp.neg_scores(pos, neg)
    want = comp.pos_scores(pos.unsqueeze(2), neg.unsqueeze(1))  # [C, P, N] by broadcasting
    assert got.shape == (2, 3, 4)
    assert torch.allclose(got, want, atol=1e-5)


def test_bias_wrapper_adds_dim_zero_of_both_sides() -> None:
    comp = build_comparator("dot", bias=True)
    lhs, rhs = torch.tensor([[10.0, 1.0, 2.0]]), torch.tensor([[100.0, 3.0, 4.0]])
    assert comp.pos_scores(lhs, rhs).tolist() == [11.0 + 10 + 100]
    cos = build_comparator("cos", bias=True)
    prepared = cos.prepare(torch.tensor([[7.0, 3.0, 4.0]]))
    assert prepared[0].tolist() == pytest.approx([7.0, 0.6, 0.8])  # bias dim is not normalised


def test_registry_names() -> None:
    assert COMPARATORS.names() == ["cos", "dot", "l2", "squared_l2"]


def test_squared_l2_is_not_clamped_and_both_orientations_agree() -> None:
    """PBG's squared_l2 leaves the all-pairs distance unclamped: rounding can make it negative."""
    x = torch.randn(1, 200, 16, generator=torch.Generator().manual_seed(0))
    comparator = build_comparator("squared_l2")
    scores = comparator.neg_scores(x, x)
    self_scores = scores[0].diagonal()
    assert bool((self_scores > 0).any())  # a clamp at 0 would leave every one <= 0
    # PBG's formula: (|n|^2 - 2 p.n) + |p|^2 with norm().pow(2), one baddbmm.
    want = torch.baddbmm(x.norm(dim=-1).pow(2).unsqueeze(-2), x, x.transpose(-1, -2), alpha=-2)
    assert torch.equal(scores, want.add_(x.norm(dim=-1).pow(2).unsqueeze(-1)).neg())
    # Training's transposed product gives the same values.
    assert torch.equal(comparator.neg_scores(x, x.clone().requires_grad_(True)).detach(), scores)


@pytest.mark.parametrize("name", ["dot", "cos", "l2", "squared_l2"])
@pytest.mark.parametrize("bias", [False, True])
def test_neg_scores_written_into_a_buffer_are_the_same_bits(name: str, bias: bool) -> None:
    gen = torch.Generator().manual_seed(1)
    comp = build_comparator(name, bias)
    pos, neg = (
        comp.prepare(torch.randn(2, 32, 100, generator=gen)),
        comp.prepare(torch.randn(2, 300, 100, generator=gen)),
    )
    out = torch.full((2, 32, 300), float("nan"))
    got = comp.neg_scores(pos, neg, out=out)
    assert got.data_ptr() == out.data_ptr()
    assert torch.equal(got, comp.neg_scores(pos, neg))
