"""Which bucket a machine trains next in a distributed pass: PBG's lock server, as a pure object.

Several machines train buckets of one pass at once. A bucket may start only when none of
the partitions it needs is held by a bucket running on another machine, so no partition is
trained in two places at once (each machine loads, trains and saves the ones it holds). The
coordinator (in this project the ``pbg`` flow) owns one :class:`BucketLocks` per pass and
asks it for a bucket whenever a machine is free. The rules are PBG's:

- **Locks.** The partitions of partitioned entity types a bucket needs, lhs and rhs sides,
  are locked while it runs; a machine never waits for its own locks.
- **Cost rule.** Among the buckets that can start, the one needing the fewest rows not
  already on that machine: the cost of a candidate is the sum, over the (entity type,
  partition) pairs in the symmetric difference of the machine's previous bucket and the
  candidate, of that type's average partition size. Ties go to the smallest bucket
  (lexicographic ``(lhs, rhs)``). A machine without a previous bucket sees every candidate
  at the same cost, so it takes the smallest.
- **Tree initialisation** (``distributed_tree_init_order``, first pass of a fresh model
  only): after the very first bucket, a bucket can start only if all its lhs-side pairs or
  all its rhs-side pairs were already in a bucket that started, so every new partition is
  first trained against one that is already trained. Beyond PBG, while some partition has
  not started, a bucket that starts one goes before cheaper ones: PBG's cost rule keeps a
  machine on the partitions it holds, and with one entity type on both sides no other
  machine can start until three partitions have (measured on 4x4 with 2 machines: the
  second idled for 5 of the first 16 buckets).

Faults, which PBG does not handle: :meth:`BucketLocks.abandon` gives the bucket of a lost
machine back to the pass and frees its locks; another machine then trains it from its
partitions' last saved state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pbg_core.errors import UsageError
from pbg_core.types import Bucket, EntityName, PartitionKey

# What a bucket needs: its partitioned (entity type, partition) pairs on the lhs and on the rhs side.
Sides = Callable[[Bucket], tuple[Sequence[PartitionKey], Sequence[PartitionKey]]]


@dataclass
class BucketLocks:
    """The lock server of one pass: pending, running and finished buckets, and who holds what.

    Attributes:
        buckets: The pass's buckets (any order: ties go to the smallest).
        sides: A bucket's partitioned (entity, partition) pairs per side.
        average_rows: Average partition size per partitioned entity type (the cost rule's weight).
        tree_init: Apply the tree initialisation rule (a fresh model's first pass).
        running: Machine -> the bucket it trains.
        finished: Buckets whose training was released as done (a resumed pass starts with its done ones).
        previous: Machine -> the bucket it trained last (kept across ``release``).
    """

    buckets: Sequence[Bucket]
    sides: Sides
    average_rows: Mapping[EntityName, float]
    tree_init: bool = False
    running: dict[str, Bucket] = field(default_factory=dict)
    finished: set[Bucket] = field(default_factory=set)
    previous: dict[str, Bucket] = field(default_factory=dict)
    _started: set[PartitionKey] = field(default_factory=set)

    def __post_init__(self) -> None:
        # A resumed pass: the buckets finished before count as started for the tree rule.
        for bucket in self.finished:
            self._started.update(self._keys(bucket))

    @property
    def remaining(self) -> int:
        """Buckets not finished yet (running ones included): 0 ends the pass."""
        return len(self.buckets) - len(self.finished)

    def acquire(self, machine: str) -> Bucket | None:
        """The bucket ``machine`` trains next, locked for it; None when none can start now.

        None while others run means: ask again when one of them is released. A machine
        that still holds a bucket must release or abandon it first.
        """
        if machine in self.running:
            raise UsageError(f"machine {machine!r} still holds bucket {tuple(self.running[machine])}; release it first")
        candidates = [bucket for bucket in self.buckets if self._can_start(bucket)]
        if not candidates:
            return None
        before = self._keys(self.previous[machine]) if machine in self.previous else None
        chosen = min(
            candidates, key=lambda bucket: (self._stalls_the_tree(bucket), self._cost(before, bucket), tuple(bucket))
        )
        self.running[machine] = chosen
        self._started.update(self._keys(chosen))
        return chosen

    def release(self, machine: str) -> Bucket:
        """``machine`` finished its bucket (saved durably): the bucket is done, its locks free."""
        bucket = self._held(machine)
        self.finished.add(bucket)
        self.previous[machine] = bucket
        return bucket

    def abandon(self, machine: str) -> Bucket | None:
        """``machine`` was lost: its bucket, if any, goes back to the pass and its locks are freed."""
        bucket = self.running.pop(machine, None)
        self.previous.pop(machine, None)  # its memory is gone: no partition is held there any more
        return bucket

    def held_keys(self) -> dict[PartitionKey, str]:
        """Every locked (entity, partition) pair and the machine holding it."""
        return {key: machine for machine, bucket in self.running.items() for key in self._keys(bucket)}

    # ---- rules -----------------------------------------------------------------------------
    def _held(self, machine: str) -> Bucket:
        if machine not in self.running:
            raise UsageError(f"machine {machine!r} holds no bucket; running: {self._describe_running()}")
        return self.running.pop(machine)

    def _can_start(self, bucket: Bucket) -> bool:
        if bucket in self.finished or bucket in self.running.values():
            return False
        held = self.held_keys()  # never the asking machine's own: it released its bucket first
        if any(key in held for key in self._keys(bucket)):
            return False
        return not self.tree_init or not self._started or self._grows_the_tree(bucket)

    def _grows_the_tree(self, bucket: Bucket) -> bool:
        """Whether all of one side's pairs are in buckets that started (the tree initialisation rule)."""
        lhs, rhs = self.sides(bucket)
        return all(key in self._started for key in lhs) or all(key in self._started for key in rhs)

    def _stalls_the_tree(self, bucket: Bucket) -> bool:
        """Whether, in a tree-init pass with partitions still unstarted, ``bucket`` starts none of them."""
        if not self.tree_init or not self._started:
            return False
        return self._keys(bucket) <= self._started

    def _cost(self, before: set[PartitionKey] | None, bucket: Bucket) -> float:
        if before is None:
            return 0.0
        return sum(self.average_rows[entity] for entity, _ in before ^ self._keys(bucket))

    def _keys(self, bucket: Bucket) -> set[PartitionKey]:
        lhs, rhs = self.sides(bucket)
        return {*lhs, *rhs}

    def _describe_running(self) -> str:
        return ", ".join(f"{m} {tuple(b)}" for m, b in sorted(self.running.items())) or "none"
