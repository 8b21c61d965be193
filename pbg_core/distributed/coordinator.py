"""The coordinator of a distributed pass: PBG's lock server and parameter server, in the flow's process.

A :class:`Coordinator` owns, for the whole run:

- a :class:`~pbg_core.session.engine.TrainingSession` that trains nothing itself: it holds the
  shared parameters (:mod:`.shared_state`), the pass's record (:class:`~pbg_core.ports.PassProgress`)
  and the checkpoint steps (write, switch, preserve, remove), exactly as on one machine;
- per pass, the :class:`~.bucket_locks.BucketLocks` that decide which bucket a free machine
  trains next, and the buckets in flight;
- the stamp of every partition's latest save, so a machine knows which of the partitions it
  holds are still current.

A bucket is done when :meth:`Coordinator.complete` returns: the machine saved its partitions in
the bucket's own progress area, the coordinator added the machine's delta to the shared
parameters and saved them there too, then replaced the record (the commit point of a bucket).
A record written here is an ordinary pass record: its ``order`` lists the done buckets first, in
the order they finished, then the others, and a single machine can resume it (and vice versa).
Progress areas of a distributed pass are numbered from the pass's length on, so they never
meet the positions a single machine saves into.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from pbg_core.distributed import shared_state
from pbg_core.distributed.assignments import Assignment, Outcome, Stamp
from pbg_core.distributed.bucket_locks import BucketLocks
from pbg_core.ports import FINAL, PassProgress
from pbg_core.session.engine import TrainingSession
from pbg_core.session.iterations import Iteration
from pbg_core.session.records import BucketRecord, bucket_row
from pbg_core.stats import Stats
from pbg_core.types import Bucket, PartitionKey, Side

logger = logging.getLogger(__name__)


class Coordinator:
    """Hands out buckets, merges their results, records the pass.

    Args:
        session: The coordinator's session (no HOGWILD workers needed: it never trains).
        tree_init: ``distributed_tree_init_order`` (applied to the first pass of a fresh model).
        evaluate: Machines rank each bucket's held-out edges before and after training.
        merge: ``distributed_shared_merge``, a key of :data:`.shared_state.MERGES`.
    """

    def __init__(self, session: TrainingSession, tree_init: bool, evaluate: bool, merge: str = "delta") -> None:
        if session.progress_store is None:
            raise ValueError("a distributed pass needs the checkpoint's progress area (a read-only session was given)")
        self.session = session
        self.progress_store = session.progress_store
        self.tree_init = tree_init
        self.evaluate = evaluate
        self.merge = shared_state.MERGES[merge]
        self.stamps: dict[PartitionKey, Stamp] = {}
        self.running: dict[str, Assignment] = {}
        self.merged: set[int] = set()  # areas whose delta is added (a retried complete adds it once)
        self.locks: BucketLocks | None = None
        self.iteration: Iteration | None = None
        self.next_area = 0

    # ---- a pass ------------------------------------------------------------------------------
    def start_pass(self, iteration: Iteration) -> list[Bucket]:
        """Open the pass (resuming its record if an interrupted run left one); returns the buckets to train."""
        session = self.session
        remaining = session.schedule_buckets(iteration)
        progress = self._progress()
        # Stamps of this open version not in the record name saves that no longer count.
        self.stamps = {key: stamp for key, stamp in self.stamps.items() if stamp[0] != iteration.version}
        for key, where in progress.partitions.items():
            self.stamps[key] = (iteration.version, where)
        fresh_model = session.residency.committed_version == 0 and session.residency.init_store is None
        self.locks = BucketLocks(
            buckets=list(progress.order),
            sides=self._sides,
            average_rows=self._average_rows(),
            tree_init=self.tree_init and iteration.index == 0 and fresh_model,
            finished=set(progress.order[: progress.done]),
        )
        referenced = [where for where in [*progress.partitions.values(), progress.model] if where is not None]
        self.next_area = max([len(progress.order), *[where + 1 for where in referenced]])
        self.running = {}
        self.merged = set()  # areas are numbered per pass: a new pass's start again
        self.iteration = iteration
        return remaining

    @property
    def remaining(self) -> int:
        """Buckets of the pass not done (in flight included)."""
        return self._locks().remaining

    def assign(self, machine: str) -> Assignment | None:
        """The next bucket for the free ``machine``, locked for it; None when none can start now."""
        bucket = self._locks().acquire(machine)
        if bucket is None:
            return None
        assignment = Assignment(
            iteration=self._iteration(),
            bucket=bucket,
            area=self.next_area,
            committed_version=self.session.residency.committed_version,
            locations=dict(self.session.residency.locations),
            stamps=dict(self.stamps),
            shared=shared_state.snapshot(shared_state.shared_tensors(self.session)),
            evaluate=self.evaluate,
        )
        self.next_area += 1
        self.running[machine] = assignment
        return assignment

    def complete(self, machine: str, outcome: Outcome) -> dict[str, Any]:
        """Record ``machine``'s trained bucket (durably); returns its stats row.

        Safe to retry after a storage failure: the delta is added once, the saves are redone.
        """
        assignment = self.running[machine]
        if outcome.bucket != assignment.bucket or outcome.area != assignment.area:
            raise ValueError(
                f"machine {machine!r} returned bucket {tuple(outcome.bucket)} (area {outcome.area}); "
                f"it was assigned {tuple(assignment.bucket)} (area {assignment.area})"
            )
        session, residency, iteration = self.session, self.session.residency, self._iteration()
        if assignment.area not in self.merged:
            self.merge(shared_state.shared_tensors(session), assignment.shared, outcome.delta)
            self.merged.add(assignment.area)
        stamp = (residency.open_version, assignment.area)
        for key in outcome.saved:
            residency.locations[key] = assignment.area
            self.stamps[key] = stamp
        # The shared parameters as they are now go beside the bucket's partitions.
        residency.mark_dirty(session.settings.unpartitioned_keys(), assignment.area)
        residency.save_dirty(assignment.area)
        area = self.progress_store.area(iteration.version, assignment.area)
        session.model_state.save(area, iteration.version, residency.metadata())
        row = self._row(machine, outcome)
        self._record(assignment.bucket, assignment.area, row)
        del self.running[machine]
        self._locks().release(machine)
        return row

    def abandon(self, machine: str) -> Bucket | None:
        """``machine`` was lost: its bucket goes back to the pass (retrained from its last saved state)."""
        self.running.pop(machine, None)
        return self._locks().abandon(machine)

    # ---- helpers -----------------------------------------------------------------------------
    def _record(self, bucket: Bucket, area: int, row: dict[str, Any]) -> None:
        """Replace the pass's record: ``bucket`` done, saves at their new places."""
        progress = self._progress()
        done = [*progress.order[: progress.done], bucket]
        updated = replace(
            progress,
            order=done + [b for b in progress.order if b not in done],
            done=len(done),
            partitions=dict(self.session.residency.locations),
            model=area,
            rows=[*progress.rows, row],
        )
        self.progress_store.write(updated)
        keep = {where for where in [*updated.partitions.values(), updated.model] if where not in (None, FINAL)}
        keep |= {assignment.area for assignment in self.running.values()}  # being written by machines
        self.progress_store.prune(updated.version, keep)
        self.session.progress = updated
        self.session.model_where = area

    def _row(self, machine: str, outcome: Outcome) -> dict[str, Any]:
        progress = self._progress()
        record = BucketRecord(
            bucket=outcome.bucket,
            position=progress.done,
            train=Stats.from_dict(outcome.train),
            eval_before=Stats.from_dict(outcome.eval_before) if outcome.eval_before is not None else None,
            eval_after=Stats.from_dict(outcome.eval_after) if outcome.eval_after is not None else None,
            timing=dict(outcome.timing),
            io=dict(outcome.io),
        )
        row = bucket_row(record, self._iteration(), len(progress.order))
        row["machine"] = machine
        return row

    def _sides(self, bucket: Bucket) -> tuple[list[PartitionKey], list[PartitionKey]]:
        topology = self.session.settings.topology
        partitioned = topology.partitioned_types

        def of(side: Side) -> list[PartitionKey]:
            return [key for key in topology.side_partitions(bucket, side) if key[0] in partitioned]

        return of(Side.LHS), of(Side.RHS)

    def _average_rows(self) -> dict[str, float]:
        sizes: dict[str, list[int]] = {}
        for (entity, _), count in self.session.residency.counts.items():
            sizes.setdefault(entity, []).append(count)
        return {entity: sum(counts) / len(counts) for entity, counts in sizes.items()}

    def _progress(self) -> PassProgress:
        if self.session.progress is None:
            raise RuntimeError("no pass is open: call start_pass(iteration) first")
        return self.session.progress

    def _locks(self) -> BucketLocks:
        if self.locks is None:
            raise RuntimeError("no pass is open: call start_pass(iteration) first")
        return self.locks

    def _iteration(self) -> Iteration:
        if self.iteration is None:
            raise RuntimeError("no pass is open: call start_pass(iteration) first")
        return self.iteration
