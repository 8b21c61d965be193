"""Single-machine bucket scheduling for one pass: what to train next and which tables to move.

A :class:`BucketScheduler` walks an ordered bucket list (from
:mod:`pbg_core.bucket_order`), skipping buckets already done in this pass (resume).
Before each bucket it says how memory must change, as a :class:`Swap`:

- a *table* is one partitioned (entity type, partition) embedding table; a bucket
  needs, for each side, the tables of that side's partitioned entity types;
- tables needed by both the previous and the next bucket stay in memory (PBG keeps
  them too); an entity type present on both sides shares its table across sides, so
  moving from (0, 1) to (1, 0) moves nothing;
- tables no longer needed are evicted, and saved first if *dirty* (trained since
  they were loaded); tables newly needed are loaded.

After the last bucket, :meth:`BucketScheduler.flush` evicts everything and saves
whatever is dirty, so at the end of a pass every trained table has been saved
exactly once since its last training. The scheduler is pure bookkeeping: the engine
performs the I/O the swaps describe. Invariants (checked by the tests): each pending
bucket is yielded once, a table is never loaded while already in memory, and no
dirty table is ever dropped without a save.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from pbg_core.types import Bucket, EntityName, Partition, Side

TableKey = tuple[EntityName, Partition]


@dataclass(frozen=True)
class Swap:
    """How memory changes between two consecutive buckets (sorted tuples of tables).

    Attributes:
        previous: The bucket trained before (``None`` at the start of the pass).
        bucket: The bucket about to be trained (``None`` for the final flush).
        keep: Tables needed by both, left in memory untouched.
        evict: Tables leaving memory.
        save: The evicted tables that are dirty: write them before releasing memory.
        load: Tables to bring into memory.
    """

    previous: Bucket | None
    bucket: Bucket | None
    keep: tuple[TableKey, ...]
    evict: tuple[TableKey, ...]
    save: tuple[TableKey, ...]
    load: tuple[TableKey, ...]

    @property
    def is_noop(self) -> bool:
        """True when nothing is saved, evicted or loaded."""
        return not (self.evict or self.save or self.load)


@dataclass(frozen=True)
class Step:
    """One bucket to train and the swap that prepares memory for it.

    Attributes:
        bucket: The bucket to train.
        position: Its 0-based index in the pass's full order (stable across resumes,
            so stats rows keep their index).
        remaining: Buckets still to train in this pass after this one.
        swap: The memory change to apply before training ``bucket``.
    """

    bucket: Bucket
    position: int
    remaining: int
    swap: Swap


@dataclass
class BucketScheduler:
    """One pass over an ordered bucket list; build with :meth:`build`.

    Use::

        for step in scheduler:
            apply(step.swap)        # save, release, load
            train(step.bucket)
            scheduler.complete(step.bucket)
        apply(scheduler.flush())    # save every dirty table, release all

    Attributes:
        order: Every bucket of the pass, in training order.
        partitioned: Partitioned entity types per side.
        done: Buckets already finished in this pass (given ones are skipped).
        loaded: Tables currently in memory.
        dirty: Loaded tables trained since they were loaded.
    """

    order: tuple[Bucket, ...]
    partitioned: Mapping[Side, frozenset[EntityName]]
    done: set[Bucket] = field(default_factory=set)
    loaded: set[TableKey] = field(default_factory=set, init=False)
    dirty: set[TableKey] = field(default_factory=set, init=False)
    _current: Bucket | None = field(default=None, init=False)
    _current_completed: bool = field(default=True, init=False)

    @classmethod
    def build(
        cls,
        order: Sequence[Bucket],
        partitioned: Mapping[Side, Collection[EntityName]],
        done: Collection[Bucket] = (),
    ) -> BucketScheduler:
        """Validate and build a scheduler for one pass.

        Args:
            order: Every bucket of the pass in training order (no repeats).
            partitioned: Partitioned entity types of each side (missing side = none).
            done: Buckets of ``order`` already trained in this pass, to skip on resume.

        Returns:
            A scheduler with nothing in memory.

        Raises:
            ValueError: if ``order`` repeats a bucket or ``done`` names a bucket not in it.
        """
        buckets = tuple(Bucket(*b) for b in order)
        repeated = sorted(b for b, times in Counter(buckets).items() if times > 1)
        if repeated:
            raise ValueError(f"bucket order repeats {', '.join(map(str, repeated))}; each bucket must appear once")
        done_set = {Bucket(*b) for b in done}
        unknown = sorted(done_set - set(buckets))
        if unknown:
            raise ValueError(f"done buckets {', '.join(map(str, unknown))} are not in the order of this pass")
        sides = {side: frozenset(partitioned.get(side, ())) for side in Side}
        return cls(order=buckets, partitioned=sides, done=done_set)

    def tables(self, bucket: Bucket) -> frozenset[TableKey]:
        """The partitioned tables ``bucket`` needs in memory."""
        return frozenset(
            (entity, bucket.get_partition(side)) for side in Side for entity in self.partitioned[side]
        )

    @property
    def pending(self) -> list[Bucket]:
        """Buckets of the order not done yet, in order (includes the current one until completed)."""
        return [b for b in self.order if b not in self.done]

    def __iter__(self) -> Iterator[Step]:
        """Yield each pending bucket once, with the swap that prepares it.

        Raises:
            RuntimeError: when asked for the next bucket before the current one was
                passed to :meth:`complete`.
        """
        positions = [i for i, b in enumerate(self.order) if b not in self.done]
        for k, position in enumerate(positions):
            bucket = self.order[position]
            self._require_completed(f"moving to {bucket}")
            swap = self._swap_to(bucket)
            self._current_completed = False
            yield Step(bucket=bucket, position=position, remaining=len(positions) - k - 1, swap=swap)
        self._require_completed("ending the pass")

    def complete(self, bucket: Bucket, trained: bool = True) -> None:
        """Record that the current bucket is finished.

        Args:
            bucket: The bucket last yielded.
            trained: Whether its tables were updated (False for evaluation only);
                trained tables become dirty and will be saved when evicted.

        Raises:
            ValueError: if ``bucket`` is not the bucket last yielded and still open.
        """
        if self._current_completed or bucket != self._current:
            raise ValueError(f"cannot complete {bucket}: the open bucket is {self._current}")
        if trained:
            self.dirty |= self.tables(bucket)
        self.done.add(bucket)
        self._current_completed = True

    def flush(self) -> Swap:
        """Evict every loaded table, saving the dirty ones; the end-of-pass step.

        Can also be called between buckets mid-pass; iteration then reloads what the
        next bucket needs.

        Returns:
            The swap to apply; afterwards nothing is loaded and nothing is dirty.

        Raises:
            RuntimeError: if the bucket last yielded was not completed (after a
                failure, drop the in-memory state instead of flushing it).
        """
        self._require_completed("flushing")
        return self._swap_to(None)

    def _swap_to(self, bucket: Bucket | None) -> Swap:
        needed = self.tables(bucket) if bucket is not None else frozenset()
        keep, evict, load = self.loaded & needed, self.loaded - needed, needed - self.loaded
        save = evict & self.dirty
        swap = Swap(
            previous=self._current,
            bucket=bucket,
            keep=tuple(sorted(keep)),
            evict=tuple(sorted(evict)),
            save=tuple(sorted(save)),
            load=tuple(sorted(load)),
        )
        self.dirty -= save
        self.loaded = set(needed)
        self._current = bucket
        return swap

    def _require_completed(self, action: str) -> None:
        if not self._current_completed:
            raise RuntimeError(f"{action} before completing {self._current}: call complete() first")
