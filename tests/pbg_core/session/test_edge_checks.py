"""Loaded edges are checked against the bucket's entity counts before training."""

from __future__ import annotations

import pytest
import torch

from pbg_core.edgelist import EdgeList
from pbg_core.session.edge_checks import BadEdgesError, check_edges
from pbg_core.types import Bucket, Side

SIDES = (("user", "item"), ("user", "user"))
PARTS = {("user", Side.LHS): 1, ("item", Side.RHS): 0, ("user", Side.RHS): 0}
COUNTS = {("user", 0): 5, ("user", 1): 3, ("item", 0): 4}


def edges(lhs: list[int], rel: list[int], rhs: list[int]) -> EdgeList:
    return EdgeList.from_tensors(torch.tensor(lhs), torch.tensor(rhs), torch.tensor(rel))


def test_in_range_edges_pass() -> None:
    check_edges(edges([0, 2, 2], [0, 1, 0], [3, 4, 0]), "p", Bucket(1, 0), SIDES, PARTS, COUNTS, frozenset())


def test_offset_beyond_the_partition_count_names_edge_type_and_range() -> None:
    with pytest.raises(
        BadEdgesError,
        match=r"p bucket \( 1 , 0 \): edge 1 has rhs offset 4, but entity type "
        r"'item' has 4 entities in partition 0 \(allowed 0..3\)",
    ):
        check_edges(edges([0, 1], [1, 0], [4, 4]), "p", Bucket(1, 0), SIDES, PARTS, COUNTS, frozenset())


def test_unknown_relation_and_negative_offsets_are_rejected() -> None:
    with pytest.raises(BadEdgesError, match="edge 0 has relation 2, allowed 0..1"):
        check_edges(edges([0], [2], [0]), "p", Bucket(1, 0), SIDES, PARTS, COUNTS, frozenset())
    with pytest.raises(BadEdgesError, match="lhs offset -1"):
        check_edges(edges([-1], [0], [0]), "p", Bucket(1, 0), SIDES, PARTS, COUNTS, frozenset())


def test_featurized_offsets_are_not_checked() -> None:
    check_edges(edges([0], [0], [99]), "p", Bucket(1, 0), SIDES, PARTS, COUNTS, frozenset({"item"}))


def _reference_ok(e: EdgeList) -> bool:
    """Per-edge truth: each relation id valid, each non-featurized offset below its own limit."""
    for lhs, rel, rhs in zip(e.lhs.tensor.tolist(), e.rel.tolist(), e.rhs.tensor.tolist(), strict=True):
        if not 0 <= rel < len(SIDES):
            return False
        for side, offset in ((Side.LHS, lhs), (Side.RHS, rhs)):
            name = side.pick(*SIDES[rel])
            if not 0 <= offset < COUNTS[name, PARTS[name, side]]:
                return False
    return True


@pytest.mark.parametrize("seed", range(40))
def test_fast_path_and_per_edge_check_agree(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    n = 6
    e = edges(
        torch.randint(-1, 4, (n,), generator=gen).tolist(),
        torch.randint(0, 3, (n,), generator=gen).tolist(),
        torch.randint(-1, 6, (n,), generator=gen).tolist(),
    )
    if _reference_ok(e):
        check_edges(e, "p", Bucket(1, 0), SIDES, PARTS, COUNTS, frozenset())
    else:
        with pytest.raises(BadEdgesError):
            check_edges(e, "p", Bucket(1, 0), SIDES, PARTS, COUNTS, frozenset())


def test_large_in_range_chunk_takes_the_one_pass_path() -> None:
    from pbg_core.session import edge_checks

    n = 10_000
    e = edges([0] * n, [0, 1] * (n // 2), [i % 4 for i in range(n)])
    assert edge_checks._all_within(e, 2, SIDES, PARTS, COUNTS, frozenset())
    check_edges(e, "p", Bucket(1, 0), SIDES, PARTS, COUNTS, frozenset())
