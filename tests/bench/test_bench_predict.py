"""bench.predict: its arithmetic and its independent reference (no run of the benchmark)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bench.predict import (
    apply_operator,
    bound_seconds,
    compare_lists,
    known_by_query,
    mrr_from_ranks,
    parse_args,
    read_relation_params,
    reference_scores,
    reference_top,
    top_lists,
)


def test_mrr_counts_each_side_of_each_edge_once() -> None:
    assert mrr_from_ranks([1, 2], [4, 1]) == pytest.approx((1 + 0.5 + 0.25 + 1) / 4)


def test_the_reference_operators_are_the_models() -> None:
    from pbg_core.model.operators import OPERATORS

    generator = torch.Generator().manual_seed(0)
    rows = torch.randn(5, 6, generator=generator)
    for name in ("none", "translation", "diagonal", "complex_diagonal"):
        operator = OPERATORS.get(name)(6)
        for param in operator.parameters():
            param.data = torch.randn(param.shape, generator=generator)
        params = {key: value.detach().numpy().astype(np.float64) for key, value in operator.named_parameters()}
        want = operator(rows).detach().numpy()
        assert np.allclose(apply_operator(name, rows.numpy().astype(np.float64), params), want, atol=1e-6), name


def test_relation_types_tsv_is_read_back_with_its_shapes(tmp_path: Path) -> None:
    path = tmp_path / "relation_types.tsv"
    path.write_text(
        "treats\tlhs\tcomplex_diagonal\treal\t2\t1.0\t2.0\ntreats\trhs\tlinear\tlinear_transformation\t2x2\t1\t0\t0\t1\n"
    )
    params = read_relation_params(path)
    assert params[("treats", "lhs")]["real"].tolist() == [1.0, 2.0]
    assert params[("treats", "rhs")]["linear_transformation"].tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_the_reference_orders_ties_by_row_and_leaves_known_rows_out() -> None:
    table = np.array([[1.0], [2.0], [2.0], [0.5]])
    scores = reference_scores(table, np.array([[1.0], [1.0]]), [set(), {1}])
    assert reference_top(scores, 3) == [[1, 2, 0], [2, 0, 3]]
    assert reference_top(reference_scores(table, np.array([[1.0]]), [{0, 1, 2}]), 3) == [[3]]


def test_lists_are_equal_near_tie_swaps_or_different() -> None:
    scores = np.array([[3.0, 2.0, 2.0 + 1e-9, 1.0]] * 3)
    found = [[0, 2, 1], [0, 1, 2], [0, 3, 1]]
    reference = reference_top(scores, 3)
    assert reference == [[0, 2, 1]] * 3
    assert compare_lists(found, reference, scores) == {"equal": 1, "near_tie": 1, "differ": 1}


def test_known_answers_by_query_and_side() -> None:
    edges = [("a", "r", "b"), ("a", "r", "c"), ("b", "r", "c")]
    index = {"a": 0, "b": 1, "c": 2}
    assert known_by_query(edges, [("a", "r"), ("c", "r")], True, index) == [{1, 2}, set()]
    assert known_by_query(edges, [("c", "r")], False, index) == [{0, 1}]


def test_top_lists_read_predict_rows_in_query_order() -> None:
    rows = [
        {"query": 1, "tail": None, "rank": None, "answer_partition_rank": 3},
        {"query": 0, "tail": "b", "rank": 1, "answer_partition_rank": 1},
        {"query": 0, "tail": "a", "rank": 2, "answer_partition_rank": 1},
    ]
    assert top_lists(rows, "tail", {"a": 0, "b": 1}) == ([[1, 0], []], [1, 3])


def test_the_bound_is_two_flops_per_multiply_add() -> None:
    assert bound_seconds(10_000, 1_000_000, 100, 1e11) == pytest.approx(20.0)
    assert parse_args(["--quick"]).queries == 1000
