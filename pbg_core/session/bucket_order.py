"""Bucket orders: the sequence in which one pass visits the nparts_lhs x nparts_rhs buckets.

Every order is a pure function ``order(nparts_lhs, nparts_rhs, rng) -> list[Bucket]``
registered by its PBG name in :data:`BUCKET_ORDERS` (``random``, ``affinity``,
``inside_out``, ``outside_in``). Invariants of
every order: each bucket of the grid appears exactly once, and the result depends
only on the arguments, so a seeded ``rng`` reproduces the same order (PBG used an
unseeded ``random.Random()`` each pass; callers here pass a seeded one so that a
resumed pass sees the same order and can skip the buckets it already trained).

Layers: layer ``k`` holds the buckets with ``min(lhs, rhs) == k``, i.e. the
upside-down "L" made of row ``k`` and column ``k`` from the diagonal outwards::

       |  0   1   2   3
    ---+----------------
     0 | L0  L0  L0  L0
     1 | L0  L1  L1  L1
     2 | L0  L1  L2  L2
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

from pbg_core.registry import Registry
from pbg_core.session.schedule import Needs, needs_extra_room, reuse_order
from pbg_core.types import Bucket, EntityName, PartitionKey

BucketOrderFn = Callable[[int, int, random.Random], list[Bucket]]

BUCKET_ORDERS: Registry[BucketOrderFn] = Registry("bucket order")


def _check_grid(nparts_lhs: int, nparts_rhs: int) -> None:
    if nparts_lhs < 1 or nparts_rhs < 1:
        raise ValueError(f"bucket grid must be at least 1 x 1, got nparts_lhs={nparts_lhs}, nparts_rhs={nparts_rhs}")


def pass_order(
    name: str,
    grid: tuple[int, int],
    rng: random.Random,
    needs: Needs,
    room: Mapping[EntityName, int],
    resident: Sequence[PartitionKey] = (),
) -> list[Bucket]:
    """A pass's bucket order over the ``grid`` (nparts_lhs, nparts_rhs): the order ``name`` draws with ``rng``, reordered by
    :func:`~pbg_core.session.schedule.reuse_order` when ``room`` holds more partitions than a
    bucket needs (``resident``: what memory holds now, least recently used first)."""
    order = BUCKET_ORDERS.get(name)(grid[0], grid[1], rng)
    if not needs_extra_room(order, needs, room):
        return order
    return reuse_order(order, needs, room, resident)


def lexicographic_order(nparts_lhs: int, nparts_rhs: int) -> list[Bucket]:
    """All buckets by increasing lhs, then rhs (offline evaluation's order; not a training order).

    Args:
        nparts_lhs: Number of partitions on the LHS (>= 1).
        nparts_rhs: Number of partitions on the RHS (>= 1).

    Returns:
        ``[(0, 0), (0, 1), ..., (nparts_lhs - 1, nparts_rhs - 1)]``.
    """
    _check_grid(nparts_lhs, nparts_rhs)
    return [Bucket(lhs, rhs) for lhs in range(nparts_lhs) for rhs in range(nparts_rhs)]


@BUCKET_ORDERS.register("random")
def random_order(nparts_lhs: int, nparts_rhs: int, rng: random.Random) -> list[Bucket]:
    """A uniformly random permutation of all buckets.

    Args:
        nparts_lhs: Number of partitions on the LHS (>= 1).
        nparts_rhs: Number of partitions on the RHS (>= 1).
        rng: Source of randomness (seed it for reproducible orders).

    Returns:
        Every bucket exactly once.
    """
    buckets = lexicographic_order(nparts_lhs, nparts_rhs)
    rng.shuffle(buckets)
    return buckets


@BUCKET_ORDERS.register("affinity")
def affinity_order(nparts_lhs: int, nparts_rhs: int, rng: random.Random) -> list[Bucket]:
    """Consecutive buckets share partitions as often as possible (PBG's greedy walk).

    Start at a random bucket. After each bucket ``b`` comes its transpose if still
    unvisited; then a random unvisited bucket containing ``b.lhs`` or ``b.rhs`` (as
    either of its partitions, like PBG, which assumes entity types on both sides),
    drawn from the two candidate lists weighted by their lengths; failing that, any
    unvisited bucket.

    Args:
        nparts_lhs: Number of partitions on the LHS (>= 1).
        nparts_rhs: Number of partitions on the RHS (>= 1).
        rng: Source of randomness (seed it for reproducible orders).

    Returns:
        Every bucket exactly once.
    """
    all_buckets = lexicographic_order(nparts_lhs, nparts_rhs)
    remaining = set(all_buckets)
    # Candidate lists are shuffled once and popped from the end; they are pruned
    # lazily (may hold visited buckets), which keeps the walk linear in #buckets.
    by_partition: list[list[Bucket]] = [[] for _ in range(max(nparts_lhs, nparts_rhs))]
    for bucket in all_buckets:
        by_partition[bucket.lhs].append(bucket)
        by_partition[bucket.rhs].append(bucket)
    rng.shuffle(all_buckets)
    for candidates in by_partition:
        rng.shuffle(candidates)

    current = all_buckets.pop()
    remaining.remove(current)
    order = [current]
    while remaining:
        transpose = Bucket(current.rhs, current.lhs)
        if transpose in remaining:
            remaining.remove(transpose)
            order.append(transpose)
            if not remaining:
                break
        neighbour = _pop_neighbour(by_partition[current.lhs], by_partition[current.rhs], remaining, rng)
        current = neighbour if neighbour is not None else _pop_remaining(all_buckets, remaining)
        remaining.remove(current)
        order.append(current)
    return order


def _pop_neighbour(
    same_as_lhs: list[Bucket], same_as_rhs: list[Bucket], remaining: set[Bucket], rng: random.Random
) -> Bucket | None:
    """Pop random candidates (lists weighted by length) until an unvisited one turns up."""
    while same_as_lhs or same_as_rhs:
        (chosen,) = rng.choices([same_as_lhs, same_as_rhs], weights=[len(same_as_lhs), len(same_as_rhs)])
        candidate = chosen.pop()
        if candidate in remaining:
            return candidate
    return None


def _pop_remaining(shuffled: list[Bucket], remaining: set[Bucket]) -> Bucket:
    while True:
        candidate = shuffled.pop()
        if candidate in remaining:
            return candidate


def _layer(nparts_lhs: int, nparts_rhs: int, k: int, rng: random.Random) -> list[Bucket]:
    """Layer ``k`` shuffled, with each bucket next to its transpose (in random inner order)."""
    groups = [[Bucket(k, k)]]
    for idx in range(k + 1, max(nparts_lhs, nparts_rhs)):
        group = []
        if idx < nparts_lhs:
            group.append(Bucket(idx, k))
        if idx < nparts_rhs:
            group.append(Bucket(k, idx))
        rng.shuffle(group)
        groups.append(group)
    rng.shuffle(groups)
    return [bucket for group in groups for bucket in group]


def _layers(nparts_lhs: int, nparts_rhs: int, rng: random.Random) -> list[list[Bucket]]:
    _check_grid(nparts_lhs, nparts_rhs)
    return [_layer(nparts_lhs, nparts_rhs, k, rng) for k in range(min(nparts_lhs, nparts_rhs))]


@BUCKET_ORDERS.register("outside_in")
def outside_in_order(nparts_lhs: int, nparts_rhs: int, rng: random.Random) -> list[Bucket]:
    """Layers 0, 1, 2, ... in turn, each shuffled with transposes adjacent.

    Args:
        nparts_lhs: Number of partitions on the LHS (>= 1).
        nparts_rhs: Number of partitions on the RHS (>= 1).
        rng: Source of randomness (seed it for reproducible orders).

    Returns:
        Every bucket exactly once.
    """
    return [bucket for layer in _layers(nparts_lhs, nparts_rhs, rng) for bucket in layer]


@BUCKET_ORDERS.register("inside_out")
def inside_out_order(nparts_lhs: int, nparts_rhs: int, rng: random.Random) -> list[Bucket]:
    """The layers of :func:`outside_in_order` in reverse: highest layer first (PBG's default).

    Args:
        nparts_lhs: Number of partitions on the LHS (>= 1).
        nparts_rhs: Number of partitions on the RHS (>= 1).
        rng: Source of randomness (seed it for reproducible orders).

    Returns:
        Every bucket exactly once.
    """
    layers = _layers(nparts_lhs, nparts_rhs, rng)
    return [bucket for layer in reversed(layers) for bucket in layer]
