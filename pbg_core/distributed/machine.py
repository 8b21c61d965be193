"""One machine of a distributed run: trains the buckets the coordinator assigns it.

A :class:`Machine` wraps a :class:`~pbg_core.session.engine.TrainingSession` built from the
run's config on the machine itself (its own HOGWILD workers and shared memory). For each
:class:`~.assignments.Assignment` it

1. drops the partitions it holds whose stamp is no longer the coordinator's (trained elsewhere
   since) and adopts the committed version and the pass's save locations;
2. makes the bucket's partitions resident: kept ones stay, others are read from their latest
   save (a progress area, the committed version, ``init_path``, or the seeded initialisation);
3. loads the shared parameters (:mod:`.shared_state`), evaluates, trains, evaluates;
4. saves the bucket's partitions into the assignment's progress area, durably, and returns
   what training changed in the shared parameters.

The partitions stay in memory for the next bucket (the cost rule prefers a bucket that reuses
them). A failure anywhere forgets them: the next bucket reads everything from storage.
"""

from __future__ import annotations

import logging
import time

from pbg_core.distributed import shared_state
from pbg_core.distributed.assignments import Assignment, Outcome, Stamp
from pbg_core.session.engine import TrainingSession
from pbg_core.session.records import BucketRecord
from pbg_core.types import PartitionKey

logger = logging.getLogger(__name__)


class Machine:
    """A training session driven bucket by bucket from a coordinator.

    Args:
        session: The machine's session (no read-ahead: the next bucket is not known here).
    """

    def __init__(self, session: TrainingSession) -> None:
        self.session = session
        self.stamps: dict[PartitionKey, Stamp | None] = {}  # what each resident partition holds

    def train(self, assignment: Assignment) -> Outcome:
        """Train ``assignment``'s bucket and save its partitions; see the module's steps."""
        try:
            return self._train(assignment)
        except BaseException:
            self.forget()
            raise

    def forget(self) -> None:
        """Drop every partitioned partition held (after a failure: memory may be half-trained)."""
        residency = self.session.residency
        residency.settle()
        for key in [k for k in residency.resident if k[0] in self.session.settings.resident]:
            residency.pool.release(residency.resident.pop(key))
        residency.dirty.clear()
        self.stamps.clear()

    def close(self) -> None:
        """Stop the HOGWILD workers and release memory."""
        self.session.close()

    # ---- steps -----------------------------------------------------------------------------
    def _train(self, assignment: Assignment) -> Outcome:
        session, bucket = self.session, assignment.bucket
        self._adopt(assignment)
        record = BucketRecord(bucket=bucket, position=assignment.area)
        session.current, session.records = record, [record]
        started = time.perf_counter()
        needed = session.settings.bucket_partitions(bucket)
        session.residency.io.reset()
        session.residency.make_room(needed, session.settings.resident, {})
        fresh = [key for key in needed if key not in session.residency.resident]
        session.residency.ensure_resident(needed)
        for key in fresh:
            self.stamps[key] = assignment.stamps.get(key)
        record.timing["swap"] = time.perf_counter() - started
        session.load_edges(bucket)
        tensors = shared_state.shared_tensors(session)
        shared_state.load(tensors, assignment.shared)
        before = session.evaluate("before") if assignment.evaluate else None
        train = session.train()
        after = session.evaluate("after") if assignment.evaluate else None
        change = shared_state.delta(tensors, assignment.shared)
        saved = self._save(needed, assignment)
        record.io = session.residency.io.as_dict()
        return Outcome(
            bucket=bucket,
            area=assignment.area,
            saved=saved,
            delta=change,
            train=train,
            eval_before=before,
            eval_after=after,
            timing=dict(record.timing),
            io=dict(record.io),
        )

    def _adopt(self, assignment: Assignment) -> None:
        """Follow the coordinator: its pass, committed version and save locations; drop stale partitions."""
        session, residency = self.session, self.session.residency
        session.iteration = assignment.iteration
        session.progress = None  # the coordinator keeps the pass's record
        residency.metadata.iteration = assignment.iteration.metadata()
        residency.committed_version = assignment.committed_version
        residency.locations = dict(assignment.locations)
        for key in [k for k in residency.resident if k[0] in session.settings.resident]:
            # Equal stamps, None included (never saved by a machine: the committed or initial state).
            if self.stamps.get(key) != assignment.stamps.get(key):
                residency.pool.release(residency.resident.pop(key))
                residency.dirty.discard(key)
                self.stamps.pop(key, None)
                logger.debug("dropped %s partition %d: trained elsewhere since", *key)

    def _save(self, needed: list[PartitionKey], assignment: Assignment) -> list[PartitionKey]:
        """Save the bucket's partitions into its area (durable when this returns)."""
        session, residency = self.session, self.session.residency
        started = time.perf_counter()
        saved = [key for key in needed if residency.save(key, assignment.area)]
        # The shared parameters are the coordinator's to save: here they are reloaded every bucket.
        residency.dirty.difference_update(session.settings.unpartitioned_keys())
        session.model_state.dirty = False
        stamp = (residency.open_version, assignment.area)
        for key in saved:
            self.stamps[key] = stamp
        session.current.timing["save"] = time.perf_counter() - started  # type: ignore[union-attr]  # set by _train
        return saved
