"""plan_steps and reuse_order: what stays in memory between buckets, and the order that reuses it."""

import random

import pytest

from pbg_core.session.bucket_order import BUCKET_ORDERS
from pbg_core.session.schedule import needs_extra_room, plan_steps, reuse_order
from pbg_core.types import Bucket, PartitionKey


def one_type(bucket: Bucket) -> list[PartitionKey]:
    """A partitioned entity type on both sides (PBG's LiveJournal case)."""
    return sorted({("u", bucket[0]), ("u", bucket[1])})


def two_types(bucket: Bucket) -> list[PartitionKey]:
    """Type ``a`` on the left, ``b`` on the right."""
    return [("a", bucket[0]), ("b", bucket[1])]


def order_of(name: str, n: int, seed: int = 0) -> list[Bucket]:
    return BUCKET_ORDERS.get(name)(n, n, random.Random(seed))


def replay(steps: list, needs: object, capacity: dict[str, int]) -> list[set[PartitionKey]]:
    """The resident set after each step, checking the plan's invariants on the way."""
    resident: set[PartitionKey] = set()
    seen = []
    for step in steps:
        assert set(step.evictions) <= resident and not set(step.evictions) & set(needs(step.bucket))  # type: ignore[operator]  # needs is one of the two functions above
        resident -= set(step.evictions)
        assert not set(step.loads) & resident
        resident |= set(step.loads)
        assert set(needs(step.bucket)) <= resident  # type: ignore[operator]  # as above
        for entity, room in capacity.items():
            assert sum(1 for key in resident if key[0] == entity) <= room
        seen.append(set(resident))
    return seen


@pytest.mark.parametrize("name", ["inside_out", "outside_in", "affinity", "random"])
def test_with_room_for_one_bucket_the_order_stands_and_no_more_is_loaded_than_by_pbgs_swap(name: str) -> None:
    """PBG evicts every partition the next bucket does not need; a diagonal bucket needs one,
    so keeping the other (room allows) saves a load when the next bucket needs it again."""
    order = order_of(name, 5)
    steps = plan_steps(order, one_type, {"u": 2})
    assert [step.bucket for step in steps] == order
    replay(steps, one_type, {"u": 2})
    pbg_loads, resident = 0, set()
    for bucket in order:
        pbg_loads += len(set(one_type(bucket)) - resident)
        resident = set(one_type(bucket))
    assert sum(len(step.loads) for step in steps) <= pbg_loads


@pytest.mark.parametrize("capacity", [2, 3, 5, 8])
@pytest.mark.parametrize("needs", [one_type, two_types])
def test_every_step_holds_what_its_bucket_needs_within_the_capacity(capacity: int, needs: object) -> None:
    order = order_of("random", 8, seed=capacity)
    room = {"u": capacity, "a": capacity, "b": capacity}
    steps = plan_steps(reuse_order(order, needs, room), needs, room)  # type: ignore[arg-type]  # one of the two functions
    replay(steps, needs, room)


def test_with_room_for_every_partition_each_is_loaded_once_and_none_evicted() -> None:
    steps = plan_steps(order_of("inside_out", 6), one_type, {"u": 6})
    assert sum(len(step.loads) for step in steps) == 6
    assert not any(step.evictions for step in steps)


def test_reuse_order_is_a_deterministic_permutation_of_the_configured_order() -> None:
    order = order_of("random", 7, seed=3)
    first = reuse_order(order, one_type, {"u": 4})
    assert sorted(first) == sorted(order) and len(first) == len(order)
    assert reuse_order(order, one_type, {"u": 4}) == first


def test_six_of_eight_partitions_resident_load_each_partition_about_once() -> None:
    """LiveJournal's grid (8 x 8), inside_out: PBG's swap loads 33 partitions per pass (31 when
    a diagonal bucket keeps the other partition); 6 resident with the reuse order load 11 (each
    of the 8 once, 3 of them twice)."""
    order = order_of("inside_out", 8)
    pbg = plan_steps(order, one_type, {"u": 2})
    reused = plan_steps(reuse_order(order, one_type, {"u": 6}), one_type, {"u": 6})
    assert sum(len(step.loads) for step in pbg) == 31
    assert sum(len(step.loads) for step in reused) == 11


def test_a_partition_no_remaining_bucket_needs_leaves_before_one_still_needed() -> None:
    # After (0, 1) and (1, 2) with room for 3: partition 0 is needed again by (0, 3), 1 is not.
    order = [Bucket(0, 1), Bucket(1, 2), Bucket(2, 3), Bucket(0, 3)]
    steps = plan_steps(order, one_type, {"u": 3})
    assert steps[2].evictions == (("u", 1),) and steps[2].loads == (("u", 3),)
    assert steps[3].loads == ()


def test_a_bucket_needing_more_than_the_room_is_refused_naming_the_type() -> None:
    with pytest.raises(ValueError, match="needs 2 partitions of entity type 'u'; room for 1"):
        plan_steps([Bucket(0, 1)], one_type, {"u": 1})


def test_extra_room_means_more_slots_than_any_bucket_needs() -> None:
    order = order_of("inside_out", 3)
    assert not needs_extra_room(order, one_type, {"u": 2})
    assert needs_extra_room(order, one_type, {"u": 3})
    assert needs_extra_room(order, two_types, {"a": 2, "b": 1})
