"""BucketScheduler: hand-checked swaps, resume, errors, and invariants over random passes."""

from __future__ import annotations

import random

import pytest

from pbg_core.bucket_order import BUCKET_ORDERS
from pbg_core.scheduler import BucketScheduler, Swap, TableKey
from pbg_core.types import Bucket, Side

B = Bucket
SHARED = {Side.LHS: {"e"}, Side.RHS: {"e"}}
BIPARTITE = {Side.LHS: {"user"}, Side.RHS: {"item"}}


def _run(scheduler: BucketScheduler, trained: bool = True) -> list[Swap]:
    swaps = []
    for step in scheduler:
        swaps.append(step.swap)
        scheduler.complete(step.bucket, trained=trained)
    swaps.append(scheduler.flush())
    return swaps


def _moves(swap: Swap) -> tuple[tuple[TableKey, ...], ...]:
    return swap.keep, swap.evict, swap.save, swap.load


def test_shared_entity_keeps_common_partitions_in_memory() -> None:
    order = [B(0, 0), B(0, 1), B(1, 1), B(1, 0)]
    swaps = _run(BucketScheduler.build(order, SHARED))
    e0, e1 = ("e", 0), ("e", 1)
    assert [_moves(s) for s in swaps] == [
        ((), (), (), (e0,)),
        ((e0,), (), (), (e1,)),
        ((e1,), (e0,), (e0,), ()),
        ((e1,), (), (), (e0,)),
        ((), (e0, e1), (e0, e1), ()),
    ]
    assert [(s.previous, s.bucket) for s in swaps] == [
        (None, B(0, 0)), (B(0, 0), B(0, 1)), (B(0, 1), B(1, 1)), (B(1, 1), B(1, 0)), (B(1, 0), None)
    ]


def test_transpose_of_shared_entity_moves_nothing() -> None:
    swaps = _run(BucketScheduler.build([B(0, 1), B(1, 0)], SHARED))
    assert swaps[1].is_noop and swaps[1].keep == (("e", 0), ("e", 1))


def test_bipartite_tables_are_per_side() -> None:
    swaps = _run(BucketScheduler.build([B(0, 1), B(1, 0), B(1, 1)], BIPARTITE))
    assert _moves(swaps[1]) == (
        (),
        (("item", 1), ("user", 0)),
        (("item", 1), ("user", 0)),
        (("item", 0), ("user", 1)),
    )
    assert _moves(swaps[2]) == ((("user", 1),), (("item", 0),), (("item", 0),), (("item", 1),))


def test_one_partitioned_side_only() -> None:
    # 1 x 3 grid: LHS types unpartitioned (handled elsewhere), RHS has "b" and "c".
    order = [B(0, 2), B(0, 0), B(0, 1)]
    swaps = _run(BucketScheduler.build(order, {Side.RHS: ["b", "c"]}))
    assert swaps[0].load == (("b", 2), ("c", 2))
    assert _moves(swaps[1]) == ((), (("b", 2), ("c", 2)), (("b", 2), ("c", 2)), (("b", 0), ("c", 0)))


def test_evaluation_only_pass_saves_nothing() -> None:
    swaps = _run(BucketScheduler.build([B(0, 0), B(1, 1), B(0, 1)], SHARED), trained=False)
    assert all(s.save == () for s in swaps)
    assert swaps[-1].evict == (("e", 0), ("e", 1))


def test_resume_skips_done_buckets_and_keeps_positions() -> None:
    order = [B(1, 1), B(0, 1), B(1, 0), B(0, 0)]
    scheduler = BucketScheduler.build(order, SHARED, done=[B(0, 1), B(0, 0)])
    steps = []
    for step in scheduler:
        steps.append((step.bucket, step.position, step.remaining))
        scheduler.complete(step.bucket)
    assert steps == [(B(1, 1), 0, 1), (B(1, 0), 2, 0)]
    assert scheduler.done == set(order)
    assert scheduler.pending == []


def test_everything_done_yields_nothing_and_flush_is_noop() -> None:
    scheduler = BucketScheduler.build([B(0, 0)], SHARED, done=[B(0, 0)])
    assert list(scheduler) == []
    assert scheduler.flush().is_noop


def test_pending_includes_open_bucket() -> None:
    scheduler = BucketScheduler.build([B(0, 0), B(1, 1)], SHARED)
    steps = iter(scheduler)
    first = next(steps)
    assert scheduler.pending == [B(0, 0), B(1, 1)]
    scheduler.complete(first.bucket)
    assert scheduler.pending == [B(1, 1)]


def test_next_bucket_before_complete_is_an_error() -> None:
    scheduler = BucketScheduler.build([B(0, 0), B(1, 1)], SHARED)
    steps = iter(scheduler)
    next(steps)
    with pytest.raises(RuntimeError, match=r"complete\(\)"):
        next(steps)


def test_flush_with_open_bucket_is_an_error() -> None:
    scheduler = BucketScheduler.build([B(0, 0)], SHARED)
    next(iter(scheduler))
    with pytest.raises(RuntimeError, match="flushing"):
        scheduler.flush()


def test_complete_wrong_or_twice_is_an_error() -> None:
    scheduler = BucketScheduler.build([B(0, 0), B(1, 1)], SHARED)
    steps = iter(scheduler)
    next(steps)
    with pytest.raises(ValueError, match=r"\( 1 , 1 \)"):
        scheduler.complete(B(1, 1))
    scheduler.complete(B(0, 0))
    with pytest.raises(ValueError, match="open bucket"):
        scheduler.complete(B(0, 0))


def test_build_rejects_repeats_and_unknown_done() -> None:
    with pytest.raises(ValueError, match="repeats"):
        BucketScheduler.build([B(0, 0), B(0, 1), B(0, 0)], SHARED)
    with pytest.raises(ValueError, match="not in the order"):
        BucketScheduler.build([B(0, 0)], SHARED, done=[B(3, 3)])


def test_mid_pass_flush_then_reload() -> None:
    scheduler = BucketScheduler.build([B(0, 0), B(0, 1)], SHARED)
    steps = iter(scheduler)
    scheduler.complete(next(steps).bucket)
    flushed = scheduler.flush()
    assert flushed.save == (("e", 0),) and not scheduler.loaded
    second = next(steps)
    assert second.swap.load == (("e", 0), ("e", 1)) and second.swap.previous is None


# ---- invariants over random passes ----------------------------------------------------------
PARTITIONINGS = [
    SHARED,
    BIPARTITE,
    {Side.LHS: {"a", "b"}, Side.RHS: {"b", "c"}},
    {Side.LHS: {"a"}, Side.RHS: set()},
]


@pytest.mark.parametrize("order_name", ["random", "affinity", "inside_out", "outside_in"])
@pytest.mark.parametrize("partitioned", PARTITIONINGS)
@pytest.mark.parametrize("seed", range(6))
def test_invariants_on_random_passes(order_name: str, partitioned: dict[Side, set[str]], seed: int) -> None:
    rng = random.Random(seed)
    grid = rng.choice([(1, 1), (1, 4), (4, 1), (3, 3), (4, 6), (5, 5)])
    order = BUCKET_ORDERS.get(order_name)(*grid, rng)
    done = set(rng.sample(order, rng.randrange(len(order))))
    scheduler = BucketScheduler.build(order, partitioned, done=done)

    memory: set[TableKey] = set()
    dirty: set[TableKey] = set()  # our own model of "trained since loaded"
    yielded = []
    previous_needed: set[TableKey] = set()
    for step in scheduler:
        swap = step.swap
        needed = set(scheduler.tables(step.bucket))
        assert set(swap.keep) == previous_needed & needed, "keep partitions shared with the previous bucket"
        assert set(swap.load).isdisjoint(memory), "never load a table already in memory"
        assert set(swap.evict) <= memory and set(swap.keep) <= memory
        assert set(swap.save) == set(swap.evict) & dirty, "save exactly the dirty evicted tables"
        dirty -= set(swap.save)
        memory = (memory - set(swap.evict)) | set(swap.load)
        assert memory == needed
        trained = rng.random() < 0.8
        if trained:
            dirty |= needed
        scheduler.complete(step.bucket, trained=trained)
        yielded.append(step.bucket)
        previous_needed = needed
    final = scheduler.flush()
    assert set(final.evict) == memory and set(final.save) == dirty
    assert not scheduler.loaded and not scheduler.dirty

    assert yielded == [b for b in order if b not in done]
    assert scheduler.done == set(order)
