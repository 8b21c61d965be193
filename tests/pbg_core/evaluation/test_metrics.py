"""Ranks, metric sums, randomized AUC, chunk averages and the vectorized filter index."""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from pbg_core.edgelist import EdgeList
from pbg_core.errors import ShapeError
from pbg_core.evaluation.metrics import FilterIndex, auc_sum, chunk_eval_average, rank_metric_sums, ranks_from_scores
from pbg_core.model.embedder import MASKED
from pbg_core.stats import Stats
from pbg_core.types import Side

INF = float("inf")
NAN = float("nan")


# ---- ranks ----------------------------------------------------------------------------------
def test_ranks_hand_computed_ties_count_against_positive() -> None:
    pos = torch.tensor([1.0, 0.5, 3.0])
    neg = torch.tensor([[0.5, 1.0, 2.0], [0.1, -INF, 0.5], [0.0, 1.0, 2.0]])
    assert ranks_from_scores(pos, neg).tolist() == [3, 2, 1]


def test_ranks_dtype_and_no_negatives() -> None:
    ranks = ranks_from_scores(torch.tensor([0.3, -2.0]), torch.empty(2, 0))
    assert ranks.dtype == torch.int64
    assert ranks.tolist() == [1, 1]


def test_masked_negatives_never_count_even_against_minus_inf_positive() -> None:
    pos = torch.tensor([-INF, 0.0])
    neg = torch.tensor([[-INF, 0.0, -INF], [-INF, -INF, -INF]])
    assert ranks_from_scores(pos, neg).tolist() == [2, 1]


def test_nan_scores_rank_pessimistically() -> None:
    pos = torch.tensor([NAN, 5.0, NAN])
    neg = torch.tensor([[0.0, 1.0, -INF], [NAN, 1.0, 2.0], [-INF, -INF, -INF]])
    # NaN positive: beaten by both unmasked negatives; NaN negative beats a finite positive.
    assert ranks_from_scores(pos, neg).tolist() == [3, 2, 1]


@pytest.mark.parametrize(
    ("pos_shape", "neg_shape"), [((3,), (2, 4)), ((3, 1), (3, 4)), ((3,), (3,)), ((3,), (3, 2, 1))]
)
def test_ranks_reject_bad_shapes(pos_shape: tuple[int, ...], neg_shape: tuple[int, ...]) -> None:
    with pytest.raises(ShapeError, match="pos"):
        ranks_from_scores(torch.zeros(pos_shape), torch.zeros(neg_shape))


def test_ranks_match_sorting_definition_on_random_scores() -> None:
    gen = torch.Generator().manual_seed(0)
    pos = torch.randn(50, generator=gen)
    neg = torch.randn(50, 30, generator=gen)
    neg[:, ::7] = pos.unsqueeze(1)  # exact ties
    ranks = ranks_from_scores(pos, neg)
    for i in range(50):
        expected = 1 + sum(1 for value in neg[i].tolist() if value >= pos[i].item())
        assert ranks[i].item() == expected


# ---- metric sums ----------------------------------------------------------------------------
def test_rank_metric_sums_hand_computed() -> None:
    sums = rank_metric_sums(torch.tensor([1, 2, 10, 11, 60]))
    assert sums["pos_rank"] == 84.0
    assert sums["mrr"] == pytest.approx(1 + 0.5 + 0.1 + 1 / 11 + 1 / 60)
    assert (sums["r1"], sums["r10"], sums["r50"]) == (1.0, 3.0, 4.0)
    assert set(sums) == {"pos_rank", "mrr", "r1", "r10", "r50"}


def test_rank_metric_sums_are_additive_over_batches() -> None:
    ranks = torch.randint(1, 100, (40,), generator=torch.Generator().manual_seed(1))
    whole = rank_metric_sums(ranks)
    parts = [rank_metric_sums(ranks[:13]), rank_metric_sums(ranks[13:])]
    for name, value in whole.items():
        assert parts[0][name] + parts[1][name] == pytest.approx(value)


def test_rank_metric_sums_empty() -> None:
    assert rank_metric_sums(torch.empty(0, dtype=torch.int64)) == {
        "pos_rank": 0.0,
        "mrr": 0.0,
        "r1": 0.0,
        "r10": 0.0,
        "r50": 0.0,
    }


# ---- AUC -------------------------------------------------------------------------------------
def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_auc_perfect_and_worst_separation_times_num_positives() -> None:
    pos = torch.tensor([5.0, 6.0, 7.0])
    neg = torch.tensor([[0.0, 1.0], [2.0, 3.0], [1.0, 0.5]])
    assert auc_sum(pos, neg, _gen()) == 3.0
    assert auc_sum(-pos, neg, _gen()) == 0.0


def test_auc_ties_are_not_wins() -> None:
    assert auc_sum(torch.ones(4), torch.ones(4, 3), _gen()) == 0.0


def test_auc_pool_keeps_masked_negatives_as_pbg() -> None:
    """PBG's compute_randomized_auc draws from every negative score, masked (-1e9) ones too."""
    pos = torch.zeros(10)
    neg = torch.full((10, 5), MASKED)
    neg[0, 0] = 1.0  # the only unmasked negative beats every positive; the 49 masked ones are beaten
    estimate = auc_sum(pos, neg, _gen(), num_samples=100_000) / len(pos)
    assert estimate == pytest.approx(49 / 50, abs=0.005)  # excluding them would give 0


def test_auc_without_negatives_or_positives() -> None:
    assert auc_sum(torch.zeros(4), torch.zeros(4, 0), _gen()) == 0.0
    assert auc_sum(torch.zeros(0), torch.zeros(0, 3), _gen()) == 0.0


def test_auc_nan_never_wins() -> None:
    assert auc_sum(torch.full((5,), NAN), torch.zeros(5, 2), _gen()) == 0.0
    assert auc_sum(torch.zeros(5), torch.full((5, 2), NAN), _gen()) == 0.0


def test_auc_estimates_the_pairwise_win_fraction() -> None:
    gen = _gen(3)
    pos = torch.randn(2000, generator=gen) + 1.0
    neg = torch.randn(2000, 10, generator=gen)
    # Exact fraction of (pos, neg) pairs with pos > neg over the pooled negatives.
    pooled = torch.sort(neg.reshape(-1)).values
    exact = float(torch.searchsorted(pooled, pos, side="left").sum()) / (pos.numel() * pooled.numel())
    assert 0.7 < exact < 0.8  # about P(N(1,1) > N(0,1)) = 0.76
    estimate = auc_sum(pos, neg, _gen(4), num_samples=200_000) / len(pos)
    # 200k draws: standard error about 0.001.
    assert estimate == pytest.approx(exact, abs=0.005)


def test_auc_is_reproducible_per_generator_seed() -> None:
    gen = _gen(5)
    pos, neg = torch.randn(100, generator=gen), torch.randn(100, 20, generator=gen)
    assert auc_sum(pos, neg, _gen(9)) == auc_sum(pos, neg, _gen(9))


# ---- chunk average --------------------------------------------------------------------------
def test_chunk_eval_average_is_count_weighted_like_pbg() -> None:
    first = Stats(count=2, metrics={"mrr": 1.0, "pos_rank": 4.0})  # means 0.5, 2
    second = Stats(count=3, metrics={"mrr": 0.5, "pos_rank": 30.0})  # means 1/6, 10
    total = chunk_eval_average([first, None, second])
    assert total is not None
    # PBG: sum(mean_b * count_b) / sum(count_b)
    assert total.to_dict() == {"count": 5, "metrics": {"mrr": pytest.approx(0.3), "pos_rank": pytest.approx(6.8)}}


def test_chunk_eval_average_without_eval_stats() -> None:
    assert chunk_eval_average([None, None]) is None
    assert chunk_eval_average([]) is None


# ---- filter index ---------------------------------------------------------------------------
def _brute_force(
    lhs: list[int], rel: list[int], rhs: list[int], side: Side, anchors: list[int], rels: list[int]
) -> set[tuple[int, int]]:
    table: dict[tuple[int, int], set[int]] = defaultdict(set)
    for u, r, v in zip(lhs, rel, rhs, strict=True):
        if side is Side.RHS:
            table[(u, r)].add(v)
        else:
            table[(v, r)].add(u)
    return {(i, x) for i, (a, r) in enumerate(zip(anchors, rels, strict=True)) for x in table.get((a, r), ())}


def test_filter_index_hand_example() -> None:
    # Edges (lhs, rel, rhs): (0,0,1) (0,0,2) (0,1,3) (2,0,1) and a duplicate (0,0,2).
    index = FilterIndex.from_tensors(
        torch.tensor([0, 0, 0, 2, 0]), torch.tensor([0, 0, 1, 0, 0]), torch.tensor([1, 2, 3, 1, 2])
    )
    assert len(index) == 4
    rows, cols = index.known(Side.RHS, torch.tensor([0, 2, 1, 0]), torch.tensor([0, 0, 0, 1]))
    assert list(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 1), (0, 2), (1, 1), (3, 3)]
    rows, cols = index.known(Side.LHS, torch.tensor([1, 3, 3]), torch.tensor([0, 0, 1]))
    assert list(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 0), (0, 2), (2, 0)]


def test_filter_index_masks_in_the_caller_pattern() -> None:
    index = FilterIndex.from_tensors(torch.tensor([0, 0]), torch.tensor([0, 0]), torch.tensor([1, 3]))
    scores = torch.zeros(2, 5)
    rows, cols = index.known(Side.RHS, torch.tensor([0, 4]), torch.tensor([0, 0]))
    scores[rows, cols] = -INF
    assert torch.isinf(scores).nonzero().tolist() == [[0, 1], [0, 3]]


def test_filter_index_out_of_range_queries_match_nothing() -> None:
    index = FilterIndex.from_tensors(torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([1, 0]))
    # Anchor 0 with rel 2 would alias key (rel 1, anchor 2) if unchecked, etc.
    anchors = torch.tensor([-1, 2, 0, 0, 1])
    rels = torch.tensor([0, 0, 2, -1, 2**40])
    for side in Side:
        rows, cols = index.known(side, anchors, rels)
        assert rows.numel() == 0 and cols.numel() == 0


def test_filter_index_empty() -> None:
    empty = torch.empty(0, dtype=torch.int64)
    index = FilterIndex.from_tensors(empty, empty, empty)
    assert len(index) == 0
    rows, cols = index.known(Side.LHS, torch.tensor([0, 1]), torch.tensor([0, 0]))
    assert rows.numel() == 0 and cols.numel() == 0
    rows, cols = index.known(Side.RHS, empty, empty)
    assert rows.numel() == 0 and cols.numel() == 0


def test_filter_index_rejects_bad_shapes() -> None:
    with pytest.raises(ShapeError, match="lhs, rel, rhs"):
        FilterIndex.from_tensors(
            torch.zeros(3, dtype=torch.long), torch.zeros(2, dtype=torch.long), torch.zeros(3, dtype=torch.long)
        )
    with pytest.raises(ValueError, match="rhs >= 0, got minimum -1"):
        FilterIndex.from_tensors(torch.tensor([0, 1]), torch.tensor([0, 0]), torch.tensor([2, -1]))
    index = FilterIndex.from_tensors(torch.tensor([0]), torch.tensor([0]), torch.tensor([0]))
    with pytest.raises(ShapeError, match="anchors and rels"):
        index.known(Side.RHS, torch.tensor([0, 1]), torch.tensor([0]))


@pytest.mark.parametrize("seed", range(8))
def test_filter_index_matches_brute_force(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    num_lhs, num_rhs, num_rel, num_edges = 7 + seed, 5 + 2 * seed, 1 + seed % 4, 60 + 10 * seed
    lhs = torch.randint(num_lhs, (num_edges,), generator=gen)
    rel = torch.randint(num_rel, (num_edges,), generator=gen)
    rhs = torch.randint(num_rhs, (num_edges,), generator=gen)
    # Concatenate a second "filter path" overlapping the first (duplicates).
    lhs, rel, rhs = (torch.cat([t, t[: num_edges // 3]]) for t in (lhs, rel, rhs))
    index = FilterIndex.from_tensors(lhs, rel, rhs)
    for side, num_anchor in ((Side.RHS, num_lhs), (Side.LHS, num_rhs)):
        anchors = torch.randint(num_anchor + 2, (40,), generator=gen)  # some unknown anchors
        rels = torch.randint(num_rel + 1, (40,), generator=gen)
        rows, cols = index.known(side, anchors, rels)
        pairs = list(zip(rows.tolist(), cols.tolist(), strict=True))
        assert len(pairs) == len(set(pairs)), "each known edge once per query"
        assert pairs == sorted(pairs)
        expected = _brute_force(lhs.tolist(), rel.tolist(), rhs.tolist(), side, anchors.tolist(), rels.tolist())
        assert set(pairs) == expected


def test_filter_index_two_million_edges_is_vectorized() -> None:
    gen = torch.Generator().manual_seed(11)
    num_edges, num_entities, num_rel = 2_000_000, 200_000, 50
    lhs = torch.randint(num_entities, (num_edges,), generator=gen)
    rel = torch.randint(num_rel, (num_edges,), generator=gen)
    rhs = torch.randint(num_entities, (num_edges,), generator=gen)
    index = FilterIndex.from_tensors(lhs, rel, rhs)
    # Query the first 100k true edges: each must find at least its own other end.
    queries = slice(0, 100_000)
    rows, cols = index.known(Side.RHS, lhs[queries], rel[queries])
    assert rows.numel() >= 100_000
    own = torch.zeros(100_000, dtype=torch.bool)
    own[rows[cols == rhs[queries][rows]]] = True
    assert bool(own.all())
    rows, cols = index.known(Side.LHS, rhs[queries], rel[queries])
    own.zero_()
    own[rows[cols == lhs[queries][rows]]] = True
    assert bool(own.all())


def test_filter_index_build_from_edgelist() -> None:
    edges = EdgeList.from_tensors(torch.tensor([0, 1, 0]), torch.tensor([2, 2, 3]), torch.tensor([0, 0, 1]))
    index = FilterIndex.build(edges)
    rows, cols = index.known(Side.LHS, torch.tensor([2, 3]), torch.tensor([0, 1]))
    assert list(zip(rows.tolist(), cols.tolist(), strict=True)) == [(0, 0), (0, 1), (1, 0)]


def _reference_ranks(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """The documented rule, spelled out with torch ops."""
    pos_col = pos.unsqueeze(1)
    beats = ((neg >= pos_col) | torch.isnan(neg) | torch.isnan(pos_col)) & (neg != -INF)
    return beats.sum(dim=1) + 1


def test_the_rank_kernel_and_the_torch_fallback_follow_the_same_rule() -> None:
    gen = torch.Generator().manual_seed(3)
    pos, neg = torch.randn(300, generator=gen), torch.randn(300, 40, generator=gen)
    neg[torch.rand(300, 40, generator=gen) < 0.1] = -INF
    neg[torch.rand(300, 40, generator=gen) < 0.05] = NAN
    neg[:5] = pos[:5].unsqueeze(1)  # ties count against the positive
    pos[torch.rand(300, generator=gen) < 0.05] = NAN
    pos[7] = -INF
    want = _reference_ranks(pos, neg)
    assert torch.equal(ranks_from_scores(pos, neg), want)  # contiguous float32: the kernel
    strided = neg.t().contiguous().t()  # same values, not contiguous: the torch version
    assert not strided.is_contiguous() and torch.equal(ranks_from_scores(pos, strided), want)


def test_auc_draws_positives_then_negatives_from_the_whole_pool() -> None:
    gen = torch.Generator().manual_seed(5)
    pos = torch.zeros(1000)
    neg = torch.ones(1000, 50)  # every unmasked negative beats every positive
    masked = torch.rand(1000, 50, generator=gen) < 0.3
    neg[masked] = MASKED
    draws = _gen(1)
    pos_idx = torch.randint(1000, (1000,), generator=draws)
    neg_idx = torch.randint(50_000, (1000,), generator=draws)
    want = float((pos[pos_idx] > neg.reshape(-1)[neg_idx]).double().mean()) * 1000
    assert auc_sum(pos, neg, _gen(1)) == want
    assert 250 < want < 350  # the masked 30% of the pool are beaten
