"""pbg_core.evaluation.ranking: top-k and ranks over partitions, as evaluation ranks."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pbg_core.edgelist import EdgeList
from pbg_core.evaluation import ranking
from pbg_core.evaluation.metrics import FilterIndex
from pbg_core.evaluation.ranking import (
    Answers,
    QuerySet,
    RankState,
    answer_scores,
    rank_partition,
    similarity_scores,
)
from pbg_core.model.embedder import MultiRelationEmbedder, build_model
from pbg_core.model.losses import build_loss
from pbg_core.model.max_norm import renorm_table_, renormed_rows
from pbg_core.training.batching import eval_edges
from pbg_core.training.settings import BatchSettings, Evaluator
from pbg_core.training.tables import BucketTables
from pbg_core.types import Side


def make_config(**overrides: object) -> SimpleNamespace:
    """A ConfigSchema look-alike: types a and b, relations r0 (a -> b) and r1 (b -> b), all_negs."""
    cfg = SimpleNamespace(
        entities={name: SimpleNamespace(num_partitions=1, featurized=False, dimension=None) for name in "ab"},
        relations=[
            SimpleNamespace(name="r0", lhs="a", rhs="b", weight=1.0, operator="none", all_negs=True),
            SimpleNamespace(name="r1", lhs="b", rhs="b", weight=1.0, operator="none", all_negs=True),
        ],
        dimension=6,
        comparator="dot",
        bias=False,
        global_emb=False,
        regularizer="N3",
        regularization_coef=0.0,
        dynamic_relations=False,
        operator_init="identity",
    )
    cfg.__dict__.update(overrides)
    cfg.entity_dimension = lambda name: cfg.dimension
    return cfg


def with_operator(cfg: SimpleNamespace, operator: str) -> SimpleNamespace:
    for rel in cfg.relations:
        rel.operator = operator
    return cfg


# ---- top-k and counts against a brute force, on integer scores (exact, with many ties) ----------
SIZES = (20, 33, 17)  # the three partitions of type b


def integer_model(operator: str) -> MultiRelationEmbedder:
    model = build_model(with_operator(make_config(), operator), 0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randint(-1, 2, param.shape, generator=gen).float())
    return model


def integer_parts() -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Rows of small integers: every score is an exact integer, and many tie."""
    gen = torch.Generator().manual_seed(2)
    anchors = torch.randint(-2, 3, (9, 6), generator=gen).float()
    return anchors, [torch.randint(-1, 2, (n, 6), generator=gen).float() for n in SIZES]


def brute_scores(
    model: MultiRelationEmbedder, side: Side, rel: int, anchors: torch.Tensor, part: torch.Tensor
) -> np.ndarray:
    """Scores in float64 numpy, operators applied by hand (exact on integers)."""
    op = model.rhs_operators[rel]
    x, y = anchors.double().numpy(), part.double().numpy()
    if op.__class__.__name__ == "TranslationOperator":
        t = op.translation.detach().double().numpy()
        x, y = (x, y + t) if side is Side.RHS else (x + t, y)
    elif op.__class__.__name__ == "DiagonalOperator":
        d = op.diagonal.detach().double().numpy()
        x, y = (x, y * d) if side is Side.RHS else (x * d, y)
    return x @ y.T


def known_edges(rel: int) -> list[tuple[int, int, int]]:
    """Known (anchor offset, partition, target offset) for the 9 anchors."""
    gen = torch.Generator().manual_seed(3 + rel)
    edges = set()
    for anchor in range(9):
        for _ in range(6):
            p = int(torch.randint(3, (1,), generator=gen))
            edges.add((anchor, p, int(torch.randint(SIZES[p], (1,), generator=gen))))
    return sorted(edges)


def filter_for(side: Side, rel: int, part: int) -> FilterIndex:
    """The known edges whose ranked side lies in partition ``part``, as one bucket's index."""
    rows = [(a, t) for a, p, t in known_edges(rel) if p == part]
    anchors, targets = torch.tensor([a for a, _ in rows]), torch.tensor([t for _, t in rows])
    lhs, rhs = (targets, anchors) if side is Side.LHS else (anchors, targets)
    return FilterIndex.build(EdgeList.from_tensors(lhs, rhs, torch.full_like(lhs, rel)))


@pytest.mark.parametrize("operator", ["none", "translation", "diagonal"])
@pytest.mark.parametrize("side", [Side.LHS, Side.RHS], ids=["heads", "tails"])
@pytest.mark.parametrize("filtered", [False, True], ids=["raw", "filtered"])
@pytest.mark.parametrize("k", [1, 7, 100])  # 100 > the 70 entities: empty slots
def test_top_k_and_ranks_over_partitions_equal_a_brute_force_with_ties(
    operator: str, side: Side, filtered: bool, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranking, "ALL_NEGS_SCORE_BUDGET", 40)  # blocks of 1-2 queries
    model, rel = integer_model(operator), 1
    anchors, parts = integer_parts()
    known = set(known_edges(rel)) if filtered else set()
    answer_part, answer_off = torch.tensor([0, 1, 2, 1, 0, 2, 2, 1, 0]), torch.tensor([3, 0, 16, 32, 19, 5, 5, 7, 0])
    want = [brute_scores(model, side, rel, anchors, p) for p in parts]
    pos = torch.tensor([want[int(p)][q, int(o)] for q, (p, o) in enumerate(zip(answer_part, answer_off, strict=True))])
    queries = QuerySet(side, rel, anchors, torch.arange(9), Answers(answer_part, answer_off, pos.float()))
    state = RankState.empty(9, k)
    for p in (2, 0, 1):  # any order of the partitions
        rank_partition(model, queries, p, parts[p].clone(), None, filter_for(side, rel, p) if filtered else None, state)

    for q in range(9):
        entries = [(-want[p][q, o], p, o) for p in range(3) for o in range(SIZES[p]) if (q, p, o) not in known]
        top = sorted(entries)[:k]
        assert state.scores[q, : len(top)].tolist() == [-s for s, _, _ in top]
        assert state.partitions[q, : len(top)].tolist() == [p for _, p, _ in top]
        assert state.offsets[q, : len(top)].tolist() == [o for _, _, o in top]
        assert bool((state.scores[q, len(top) :] == float("-inf")).all())
        assert bool((state.offsets[q, len(top) :] == -1).all())
        answer = (int(answer_part[q]), int(answer_off[q]))
        beaten = [(p, o) for s, p, o in entries if -s >= float(pos[q]) and (p, o) != answer]
        assert int(state.answer_rank[q]) == 1 + len(beaten)
        assert int(state.answer_partition_rank[q]) == 1 + sum(1 for p, _ in beaten if p == answer[0])


def test_ties_at_the_k_th_score_keep_the_lowest_partition_and_offset() -> None:
    model = build_model(make_config(), 0)
    table = torch.zeros(12, 6)
    table[[2, 5, 9], 0] = 1.0  # three candidates tie on the best score, the rest tie at 0
    queries = QuerySet(Side.RHS, 0, torch.ones(1, 6))
    state = RankState.empty(1, 4)
    rank_partition(model, queries, 1, table.clone(), None, None, state)
    rank_partition(model, queries, 0, table.clone(), None, None, state)
    assert state.partitions.tolist() == [[0, 0, 0, 1]]
    assert state.offsets.tolist() == [[2, 5, 9, 2]]


def test_merging_a_partition_by_blocks_of_columns_equals_merging_it_whole() -> None:
    gen = torch.Generator().manual_seed(3)
    scores = torch.randint(-3, 4, (5, 23), generator=gen).float()  # many ties across the blocks
    whole, blocks = RankState.empty(5, 6), RankState.empty(5, 6)
    whole.merge(slice(0, 5), scores, 2)
    for first, stop in ((16, 23), (0, 7), (7, 16)):  # blocks in any order
        blocks.merge(slice(0, 5), scores[:, first:stop], 2, first=first)
    assert torch.equal(blocks.scores, whole.scores) and torch.equal(blocks.offsets, whole.offsets)
    assert blocks.partitions.unique().tolist() == [2]


def test_k_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        RankState.empty(3, 0)


# ---- the same ranks as evaluation ------------------------------------------------------------------
EVAL_CASES = [
    # comparator, bias, operator, dynamic, max_norm
    ("dot", True, "linear", False, None),
    ("cos", False, "affine", False, 1.0),
    ("l2", True, "translation", False, 1.0),
    ("squared_l2", False, "diagonal", False, 0.8),
    ("dot", False, "complex_diagonal", True, 1.0),
    ("l2", False, "linear", True, None),
    ("cos", True, "translation", True, 0.7),
]
COUNTS = {"a": 30, "b": 45}


def eval_model(comparator: str, bias: bool, operator: str, dynamic: bool) -> MultiRelationEmbedder:
    cfg = make_config(comparator=comparator, bias=bias, dynamic_relations=dynamic, global_emb=not dynamic, dimension=8)
    if dynamic:
        cfg.relations = cfg.relations[:1]
    model = build_model(with_operator(cfg, operator), 3 if dynamic else 0)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.3)
    return model


def eval_tables() -> dict[str, torch.Tensor]:
    """Every entity has a twin (an equal row): ties between the answer and a candidate are decided
    by the last bits of both scores, so a bit off anywhere moves ranks."""
    gen = torch.Generator().manual_seed(5)
    tables = {}
    for entity, count in COUNTS.items():
        half = torch.randn((count + 1) // 2, 8, generator=gen) * 0.7
        tables[entity] = torch.cat([half, half])[:count].clone()
    return tables


def eval_graph(dynamic: bool) -> tuple[EdgeList, EdgeList]:
    """40 edges to rank, and the known edges (those 40 and 120 more)."""
    gen = torch.Generator().manual_seed(6)

    def edges(n: int) -> EdgeList:
        rel = torch.randint(3 if dynamic else 2, (n,), generator=gen)
        lhs_count = torch.where((rel == 0) | torch.tensor(dynamic), COUNTS["a"], COUNTS["b"])
        lhs = (torch.rand(n, generator=gen) * lhs_count).long()
        return EdgeList.from_tensors(lhs, torch.randint(COUNTS["b"], (n,), generator=gen), rel)

    test = edges(40)
    return test, EdgeList.cat([test, edges(120)])


def eval_rank(
    model: MultiRelationEmbedder,
    tables: dict[str, torch.Tensor],
    test: EdgeList,
    idx: torch.Tensor,
    side: Side,
    max_norm: float | None,
    index: FilterIndex | None,
) -> float:
    """Evaluation's ``pos_rank`` sum over ``test[idx]`` ranking ``side`` only."""
    settings = BatchSettings(disable_lhs_negs=side is Side.RHS, disable_rhs_negs=side is Side.LHS, max_norm=max_norm)
    evaluator = Evaluator(model, build_loss("ranking", margin=0.1), settings)
    shared = BucketTables({(e, s): t for e, t in tables.items() for s in Side})
    stats = eval_edges(evaluator, shared, test, idx, torch.Generator().manual_seed(7), index)
    return stats.metrics["pos_rank"]


def our_ranks(
    model: MultiRelationEmbedder,
    x0: dict[str, torch.Tensor],
    test: EdgeList,
    side: Side,
    max_norm: float | None,
    index: FilterIndex | None,
) -> torch.Tensor:
    """``answer_partition_rank`` of every test edge, every table looked up fresh from ``x0``."""
    groups = [torch.arange(len(test))] if model.dynamic else [(test.rel == r).nonzero()[:, 0] for r in (0, 1)]
    ranks = torch.zeros(len(test), dtype=torch.int64)
    for rows in groups:
        rel = test.rel[rows] if model.dynamic else int(test.rel[rows[0]])
        spec = model.relation(0 if model.dynamic else rel)
        anchor_type, ranked_type = side.other.pick(spec.lhs, spec.rhs), side.pick(spec.lhs, spec.rhs)
        anchor_off, answer_off = (
            side.other.pick(test.lhs, test.rhs).tensor[rows],
            side.pick(test.lhs, test.rhs).tensor[rows],
        )
        anchors = renormed_rows(x0[anchor_type].clone(), anchor_off, max_norm, settle=True)
        answer_rows = renormed_rows(x0[ranked_type].clone(), answer_off, max_norm, settle=True)
        score = answer_scores(model, side, rel, anchors, answer_rows)
        answers = Answers(torch.zeros_like(answer_off), answer_off, score)
        state = RankState.empty(len(rows), 3)
        queries = QuerySet(side, rel, anchors, anchor_off, answers)
        rank_partition(model, queries, 0, x0[ranked_type].clone(), max_norm, index, state)
        ranks[rows] = state.answer_partition_rank
    return ranks


@pytest.mark.parametrize("case", EVAL_CASES, ids=lambda c: "-".join(str(v) for v in c))
@pytest.mark.parametrize("filtered", [False, True], ids=["raw", "filtered"])
def test_answer_partition_rank_is_evaluations_rank_edge_by_edge(case: tuple, filtered: bool) -> None:
    """Evaluation ranks one edge per call, on tables its earlier lookups renormed; ours in one block, fresh."""
    comparator, bias, operator, dynamic, max_norm = case
    model, x0 = eval_model(comparator, bias, operator, dynamic), eval_tables()
    test, known = eval_graph(dynamic)
    index = FilterIndex.build(known) if filtered else None
    for side in Side:
        ours = our_ranks(model, x0, test, side, max_norm, index)
        tables = {e: t.clone() for e, t in x0.items()}
        theirs = [eval_rank(model, tables, test, torch.tensor([i]), side, max_norm, index) for i in range(len(test))]
        assert ours.tolist() == theirs, side
        assert eval_rank(model, tables, test, torch.arange(len(test)), side, max_norm, index) == float(ours.sum())
        if filtered:
            assert bool((ours < our_ranks(model, x0, test, side, max_norm, None)).any())  # the filter bites


# ---- similarity -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("comparator", "bias"), list(itertools.product(["dot", "cos", "l2", "squared_l2"], [False, True]))
)
def test_similarity_scores_are_the_comparators_metric_with_global_embeddings(comparator: str, bias: bool) -> None:
    model = build_model(make_config(comparator=comparator, bias=bias, global_emb=True), 0)
    gen = torch.Generator().manual_seed(8)
    with torch.no_grad():
        model.global_embs["emb_b"].copy_(torch.randn(6, generator=gen))
    table, rows = torch.randn(50, 6, generator=gen), torch.randn(4, 6, generator=gen)
    got = similarity_scores(model, "b", rows, table.clone(), None)
    x, y = (t.double() + model.global_embs["emb_b"].detach().double() for t in (rows, table))
    bias_sum = x[:, :1] + y[:, :1].T if bias else 0.0
    if bias:
        x, y = x[:, 1:], y[:, 1:]
    if comparator == "cos":
        x, y = x / x.norm(dim=1, keepdim=True), y / y.norm(dim=1, keepdim=True)
    sq = torch.cdist(x, y).pow(2)
    base = {"dot": x @ y.T, "cos": x @ y.T, "l2": -sq.sqrt(), "squared_l2": -sq}[comparator]
    assert torch.allclose(got.double(), base + bias_sum, rtol=1e-5, atol=1e-4)


def test_similarity_scores_look_the_table_up_with_max_norm_settled() -> None:
    model = build_model(make_config(), 0)
    gen = torch.Generator().manual_seed(9)
    table, rows = torch.randn(50, 6, generator=gen) * 2, torch.randn(4, 6, generator=gen)
    settled = table.clone()
    renorm_table_(settled, 1.0, settle=True)
    got = similarity_scores(model, "b", rows, table, 1.0)
    assert torch.equal(table, settled)
    assert torch.equal(got, similarity_scores(model, "b", rows, settled.clone(), None))


def test_query_blocks_are_whole_row_blocks_within_the_score_budget() -> None:
    from pbg_core.evaluation.ranking import ALL_NEGS_SCORE_BUDGET, query_block_rows
    from pbg_core.model.row_blocks import ROW_BLOCK

    assert query_block_rows(125_000) == 128  # 134 fit the budget; 128 is a whole number of row blocks
    for candidates in (1, 135, 125_000, 1 << 20, 10_000_000):
        rows = query_block_rows(candidates)
        assert rows % ROW_BLOCK == 0 and rows >= ROW_BLOCK
        assert rows == ROW_BLOCK or rows * candidates <= ALL_NEGS_SCORE_BUDGET
