"""Which partitions a pass keeps in memory: the order of its buckets, and the loads and evictions before each.

With room for only the partitions one bucket needs (PBG's case: two per entity type on both
sides), a pass visits its buckets in the configured order and every move to a bucket evicts
what that bucket does not need. With room for more (``capacity`` slots per entity type), a
partition can stay in memory across buckets that do not use it, so fewer are written and read
again. Two pure functions plan that:

- :func:`reuse_order` reorders the configured order greedily: the next bucket is the one that
  needs the fewest partitions not yet in memory, the earliest in the configured order among
  those. It is applied only when the capacity exceeds what one bucket needs (the configured
  order is then a preference, not a sequence); otherwise the configured order stands as PBG's.
- :func:`plan_steps` follows a given order and says, before each bucket, which partitions to
  load and which to evict: when an entity type's slots are full, the resident partition with the
  fewest remaining uses in the pass leaves first (one that no remaining bucket needs is written
  once and for all), the least recently used among equals.

Both are deterministic: a resumed pass replans the same steps from the recorded order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pbg_core.types import Bucket, EntityName, PartitionKey

Needs = Callable[[Bucket], Sequence[PartitionKey]]


@dataclass(frozen=True)
class Step:
    """One bucket of a pass, with the partitions to evict (first) and to load before it.

    Attributes:
        bucket: The bucket trained at this step.
        evictions: Resident partitions that leave memory before it (saved if trained since loaded).
        loads: Partitions it needs that are not resident.
    """

    bucket: Bucket
    evictions: tuple[PartitionKey, ...]
    loads: tuple[PartitionKey, ...]


def needs_extra_room(order: Sequence[Bucket], needs: Needs, capacity: Mapping[EntityName, int]) -> bool:
    """Whether ``capacity`` holds more partitions of some entity type than any bucket needs."""
    most: dict[EntityName, int] = {}
    for bucket in order:
        for entity in {key[0] for key in needs(bucket)}:
            count = sum(1 for key in needs(bucket) if key[0] == entity)
            most[entity] = max(most.get(entity, 0), count)
    return any(capacity.get(entity, 0) > count for entity, count in most.items())


def reuse_order(
    order: Sequence[Bucket], needs: Needs, capacity: Mapping[EntityName, int], resident: Iterable[PartitionKey] = ()
) -> list[Bucket]:
    """``order`` reordered so that each next bucket needs the fewest partitions not in memory.

    Ties go to the earliest bucket in ``order``. ``resident`` is what memory holds at the start.
    """
    wanted = {bucket: tuple(needs(bucket)) for bucket in order}
    remaining = list(order)  # in the configured order: the first best one wins
    uses = remaining_uses(order, wanted.__getitem__)
    memory = _Memory(capacity, resident)
    result: list[Bucket] = []
    while remaining:
        best, best_missing = 0, None
        for index, bucket in enumerate(remaining):
            missing = memory.missing(wanted[bucket])
            if best_missing is None or missing < best_missing:
                best, best_missing = index, missing
                if missing == 0:
                    break
        bucket = remaining.pop(best)
        for key in wanted[bucket]:
            uses[key] -= 1
        result.append(bucket)
        memory.enter(wanted[bucket], uses)
    return result


def plan_steps(
    order: Sequence[Bucket], needs: Needs, capacity: Mapping[EntityName, int], resident: Iterable[PartitionKey] = ()
) -> list[Step]:
    """The loads and evictions before each bucket of ``order``, starting from ``resident``.

    Raises:
        ValueError: a bucket needs more partitions of an entity type than its capacity.
    """
    memory = _Memory(capacity, resident)
    uses = remaining_uses(order, needs)
    steps: list[Step] = []
    for bucket in order:
        keys = tuple(needs(bucket))
        for key in keys:
            uses[key] -= 1  # what the buckets after this one still need
        evicted, loaded = memory.enter(keys, uses)
        steps.append(Step(bucket=bucket, evictions=tuple(evicted), loads=tuple(loaded)))
    return steps


def remaining_uses(buckets: Iterable[Bucket], needs: Needs) -> dict[PartitionKey, int]:
    """How many of ``buckets`` need each partition."""
    counts: dict[PartitionKey, int] = {}
    for bucket in buckets:
        for key in needs(bucket):
            counts[key] = counts.get(key, 0) + 1
    return counts


def choose_evictions(
    resident: Sequence[PartitionKey],
    wanted: Iterable[PartitionKey],
    capacity: Mapping[EntityName, int],
    later_uses: Mapping[PartitionKey, int],
) -> list[PartitionKey]:
    """Which of ``resident`` (least recently used first) must leave so that ``wanted`` fits.

    Per entity type: the ones the fewest later buckets need leave first (none: written once
    and for all), the least recently used among equals.

    Raises:
        ValueError: ``wanted`` alone needs more partitions of a type than its capacity.
    """
    wanted = set(wanted)
    evicted: list[PartitionKey] = []
    for entity in sorted({key[0] for key in wanted} | set(capacity)):
        room = capacity.get(entity, 0)
        need = sum(1 for key in wanted if key[0] == entity)
        if need > room:
            raise ValueError(f"a bucket needs {need} partitions of entity type {entity!r}; room for {room}")
        held = [key for key in resident if key[0] == entity and key not in wanted]
        excess = len(held) + need - room
        order = sorted(range(len(held)), key=lambda i: (later_uses.get(held[i], 0), i))
        evicted.extend(held[i] for i in order[: max(excess, 0)])
    return sorted(evicted)


class _Memory:
    """The simulated resident set: per entity type, keys in least-recently-used order."""

    def __init__(self, capacity: Mapping[EntityName, int], resident: Iterable[PartitionKey]) -> None:
        self.capacity = capacity
        self.recency: list[PartitionKey] = list(dict.fromkeys(resident))  # oldest first

    def missing(self, keys: Sequence[PartitionKey]) -> int:
        """How many of ``keys`` are not resident."""
        return sum(1 for key in set(keys) if key not in self.recency)

    def enter(
        self, keys: Sequence[PartitionKey], later_uses: Mapping[PartitionKey, int]
    ) -> tuple[list[PartitionKey], list[PartitionKey]]:
        """Make ``keys`` resident (most recent); returns (evicted, loaded) keys, sorted."""
        wanted = set(keys)
        loaded = sorted(key for key in wanted if key not in self.recency)
        evicted = choose_evictions(self.recency, wanted, self.capacity, later_uses)
        self.recency = [key for key in self.recency if key not in evicted and key not in wanted]
        self.recency.extend(sorted(wanted))
        return evicted, loaded
