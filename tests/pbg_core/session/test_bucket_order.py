"""Invariants of the bucket orders: permutations, layers, transposes, seeding."""

from __future__ import annotations

import random

import pytest

from pbg_core.errors import UnknownNameError
from pbg_core.session.bucket_order import BUCKET_ORDERS, lexicographic_order
from pbg_core.types import Bucket

ORDER_NAMES = ["random", "affinity", "inside_out", "outside_in"]
GRIDS = [(1, 1), (1, 5), (5, 1), (2, 2), (4, 4), (3, 5), (6, 2), (7, 7)]


def _grid(nparts_lhs: int, nparts_rhs: int) -> set[Bucket]:
    return {Bucket(lhs, rhs) for lhs in range(nparts_lhs) for rhs in range(nparts_rhs)}


def _layer(bucket: Bucket) -> int:
    return min(bucket.lhs, bucket.rhs)


def test_registry_has_pbg_names_and_rejects_unknown() -> None:
    assert BUCKET_ORDERS.names() == sorted(ORDER_NAMES)
    with pytest.raises(UnknownNameError, match="inside_out"):
        BUCKET_ORDERS.get("inside_outt")


def test_lexicographic_order() -> None:
    assert lexicographic_order(2, 3) == [
        Bucket(0, 0),
        Bucket(0, 1),
        Bucket(0, 2),
        Bucket(1, 0),
        Bucket(1, 1),
        Bucket(1, 2),
    ]


@pytest.mark.parametrize("name", ORDER_NAMES)
@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("seed", range(5))
def test_every_bucket_exactly_once(name: str, grid: tuple[int, int], seed: int) -> None:
    order = BUCKET_ORDERS.get(name)(*grid, random.Random(seed))
    assert len(order) == grid[0] * grid[1]
    assert set(order) == _grid(*grid)
    assert all(isinstance(b, Bucket) for b in order)


@pytest.mark.parametrize("name", ORDER_NAMES)
@pytest.mark.parametrize("grid", [(0, 3), (3, 0), (-1, 2)])
def test_empty_grid_is_rejected(name: str, grid: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="nparts_lhs"):
        BUCKET_ORDERS.get(name)(*grid, random.Random(0))


@pytest.mark.parametrize("name", ORDER_NAMES)
@pytest.mark.parametrize("grid", [(4, 4), (3, 5)])
def test_deterministic_per_seed_and_varies_across_seeds(name: str, grid: tuple[int, int]) -> None:
    fn = BUCKET_ORDERS.get(name)
    assert fn(*grid, random.Random(123)) == fn(*grid, random.Random(123))
    distinct = {tuple(fn(*grid, random.Random(seed))) for seed in range(10)}
    assert len(distinct) > 1


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("seed", range(5))
def test_outside_in_visits_layers_in_increasing_order(grid: tuple[int, int], seed: int) -> None:
    order = BUCKET_ORDERS.get("outside_in")(*grid, random.Random(seed))
    layers = [_layer(b) for b in order]
    assert layers == sorted(layers)
    assert layers[0] == 0


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("seed", range(5))
def test_inside_out_visits_layers_in_decreasing_order(grid: tuple[int, int], seed: int) -> None:
    order = BUCKET_ORDERS.get("inside_out")(*grid, random.Random(seed))
    layers = [_layer(b) for b in order]
    assert layers == sorted(layers, reverse=True)
    assert layers[0] == min(grid) - 1


def test_layers_are_shuffled_internally() -> None:
    first_layer_orders = set()
    for seed in range(20):
        order = BUCKET_ORDERS.get("outside_in")(4, 4, random.Random(seed))
        first_layer_orders.add(tuple(b for b in order if _layer(b) == 0))
    assert len(first_layer_orders) > 1


@pytest.mark.parametrize("name", ["inside_out", "outside_in"])
@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("seed", range(5))
def test_layer_orders_keep_transposes_adjacent(name: str, grid: tuple[int, int], seed: int) -> None:
    order = BUCKET_ORDERS.get(name)(*grid, random.Random(seed))
    position = {b: i for i, b in enumerate(order)}
    for bucket, i in position.items():
        transpose = Bucket(bucket.rhs, bucket.lhs)
        if transpose != bucket and transpose in position:
            assert abs(position[transpose] - i) == 1, (bucket, order)


def _shares_partition(a: Bucket, b: Bucket) -> bool:
    return bool({a.lhs, a.rhs} & {b.lhs, b.rhs})


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("seed", range(10))
def test_affinity_prefers_transpose_then_shared_partition(grid: tuple[int, int], seed: int) -> None:
    order = BUCKET_ORDERS.get("affinity")(*grid, random.Random(seed))
    remaining = set(order)
    remaining.remove(order[0])
    for prev, nxt in zip(order, order[1:], strict=False):
        transpose = Bucket(prev.rhs, prev.lhs)
        if transpose in remaining:
            assert nxt == transpose, (prev, nxt, order)
        elif any(_shares_partition(prev, b) for b in remaining):
            assert _shares_partition(prev, nxt), (prev, nxt, order)
        remaining.remove(nxt)


def test_affinity_start_is_random() -> None:
    starts = {BUCKET_ORDERS.get("affinity")(4, 4, random.Random(seed))[0] for seed in range(30)}
    assert len(starts) > 3


def test_random_order_is_roughly_uniform_over_first_bucket() -> None:
    counts: dict[Bucket, int] = {}
    for seed in range(900):
        first = BUCKET_ORDERS.get("random")(3, 3, random.Random(seed))[0]
        counts[first] = counts.get(first, 0) + 1
    # 100 expected per bucket; 40..160 is > 6 sigma wide.
    assert set(counts) == _grid(3, 3)
    assert all(40 < c < 160 for c in counts.values())
