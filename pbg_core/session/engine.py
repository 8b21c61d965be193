"""The training session: the one in-process owner of live training state.

A :class:`TrainingSession` holds the model, the shared-memory embedding slots,
the HOGWILD worker pool and the current bucket's edges for a whole run. The
orchestration layer drives it one step at a time (each step is one Prefect
task) and only ever passes it small values:

    schedule_buckets -> for each bucket: swap_partitions -> load_edges ->
    evaluate("before") -> train -> evaluate("after") -> finish_bucket
    then: write_checkpoint -> switch_version -> preserve_version -> remove_old_version

Checkpoint protocol: while version ``v`` is committed, every write goes to ``v + 1``
names or to the progress area; ``switch_version`` writes the pointer last, so a crash before
it leaves ``v`` intact. ``finish_bucket`` records saved progress at save points
(:class:`~pbg_core.ports.PassProgress`): a rerun's ``schedule_buckets`` resumes after the last
recorded bucket, with partitions and model state as that bucket left them.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from pbg_core import ports
from pbg_core.edgelist import EdgeList
from pbg_core.errors import TrainingDivergedError
from pbg_core.parallel import worker_jobs
from pbg_core.parallel.hogwild import HogwildWorkers
from pbg_core.parallel.memory import release_free_memory
from pbg_core.ports import FINAL, EdgeSource, PassProgress, ProgressStore, StatsSink, VersionedStore
from pbg_core.seeding import python_rng
from pbg_core.session.bucket_order import pass_order
from pbg_core.session.dispatch import dispatch, holdout_split, shuffled
from pbg_core.session.edge_checks import check_edges
from pbg_core.session.iterations import Iteration, should_preserve
from pbg_core.session.parts import ModelState, SessionSettings
from pbg_core.session.records import BucketRecord, LoadedEdges, bucket_row, chunk_average_row
from pbg_core.session.residency import PartitionResidency
from pbg_core.session.resume import resume_or_start
from pbg_core.session.save_points import SavePoints
from pbg_core.session.schedule import remaining_uses
from pbg_core.stats import Stats
from pbg_core.types import Bucket

logger = logging.getLogger(__name__)
# Marks an iteration's step lines (swap, train, save, write, commit, remove): the run's logs keep
# them; a terminal shows them only with --verbose (flows/prefect_host/log_filters.py). Per-bucket results always show.
STEP = {"pbg_step": True}


@dataclass
class TrainingSession:
    """Live state of one training run. Build it with :func:`pbg_core.session.build.open_session`."""

    settings: SessionSettings
    model_state: ModelState
    residency: PartitionResidency
    workers: HogwildWorkers[Any]
    store: VersionedStore
    edge_sources: list[EdgeSource]
    stats_sink: StatsSink
    seed: int
    layout: ports.VersionLayout  # what a complete version holds: checked before a commit
    kept: ports.CompleteVersion  # evidence that the committed version is complete: deletions need it
    progress_store: ProgressStore | None = None
    progress: PassProgress | None = None
    model_where: int | None = None  # where the model's latest save of this pass is (None: not saved)
    records: list[BucketRecord] = field(default_factory=list)
    current: BucketRecord | None = None
    loaded: LoadedEdges | None = None
    iteration: Iteration | None = None
    buckets_in_pass: int = 0
    save_points: SavePoints = field(default_factory=lambda: SavePoints(interval=0.0))

    # ---- per iteration -------------------------------------------------------------------
    def schedule_buckets(self, iteration: Iteration) -> list[Bucket]:
        """Start the pass: its (seeded) bucket order minus the buckets an interrupted run finished."""
        buckets = self._bucket_order(iteration)
        self.iteration = iteration
        self.residency.metadata.iteration = iteration.metadata()
        self.records = []
        self.buckets_in_pass = len(buckets)
        self.progress, self.model_where = resume_or_start(
            iteration, buckets, self.progress_store, self.residency, self.model_state, self.store, self.kept
        )
        self.save_points.restart()
        return self.progress.order[self.progress.done :]

    def preload(self, iteration: Iteration) -> None:
        """Read ahead what ``iteration``'s first bucket needs: its partitions and its edge chunk.

        For a command that waits for something else anyway (``pbg train`` for its API server).
        A hint only: the bucket's swap and load find them in memory (its I/O figures then
        show no read), and a pass resumed at another bucket loads what that one needs.
        """
        bucket = self._bucket_order(iteration)[0]
        self.residency.ensure_resident(sorted(set(self.settings.bucket_partitions(bucket))))
        edges, key = self._chunk(iteration, bucket)
        empty = torch.empty(0, dtype=torch.long)
        self.loaded = LoadedEdges(edges=edges, train_idx=empty, eval_idx=empty, key=key)

    def _bucket_order(self, iteration: Iteration) -> list[Bucket]:
        """The pass's order (seeded per iteration), reordered to reuse what is resident when there is room."""
        held = [key for key in self.residency.resident if key[0] in self.settings.resident]
        rng = python_rng(self.seed, "bucket_order", iteration.index)
        grid = (self.settings.nparts_lhs, self.settings.nparts_rhs)
        needs, room = self.settings.bucket_partitions, self.settings.resident
        return pass_order(self.settings.bucket_order, grid, rng, needs, room, held)

    # ---- per bucket ----------------------------------------------------------------------
    def swap_partitions(self, bucket: Bucket) -> dict[str, float]:
        """Save partitions leaving memory, load those this bucket needs; returns IO figures."""
        # Outside a pass (offline evaluation) buckets are just numbered in call order.
        position = self.progress.order.index(bucket) if self.progress is not None else len(self.records)
        self.current = BucketRecord(bucket=bucket, position=position)
        where, of = f"{self._label()}: bucket {tuple(bucket)}", self.buckets_in_pass or 1
        logger.info("%s (%d of %d): swapping partitions", where, position + 1, of, extra=STEP)
        self.records.append(self.current)
        self.residency.io.reset()
        needed = self.settings.bucket_partitions(bucket)
        later = self.progress.order[position + 1 :] if self.progress is not None else []
        self.residency.make_room(needed, self.settings.resident, remaining_uses(later, self.settings.bucket_partitions))
        self.residency.ensure_resident(needed)
        self.current.io = self.residency.io.as_dict()
        return self.current.io

    def load_edges(self, bucket: Bucket) -> dict[str, int]:
        """Load this iteration's chunk of ``bucket`` and hold out the eval fraction."""
        iteration = self._require_iteration()
        started = time.perf_counter()
        edges, key = self._chunk(iteration, bucket)
        train_idx, eval_idx = holdout_split(len(edges), self.settings.eval_fraction, self.seed, iteration, bucket)
        self.loaded = LoadedEdges(edges=edges, train_idx=train_idx, eval_idx=eval_idx, key=key)
        num_eval = len(eval_idx)
        release_free_memory()
        self._record().timing["load_edges"] = time.perf_counter() - started
        return {"edges": len(edges), "train": len(edges) - num_eval, "eval": num_eval}

    def _chunk(self, iteration: Iteration, bucket: Bucket) -> tuple[EdgeList, tuple[Any, ...]]:
        """The iteration's chunk of ``bucket`` (checked, in shared memory) and the key it was read for."""
        source = self.edge_sources[iteration.edge_path_idx]
        key = (
            iteration.edge_path_idx,
            iteration.edge_chunk_idx,
            iteration.num_edge_chunks,
            bucket,
            source.stamp(bucket),
        )
        if self.loaded is not None and key[-1] is not None and self.loaded.key == key:
            # The chunk held already (a 1-bucket, 1-chunk run trains it every epoch), its file
            # unchanged: PBG reads it again; we keep it (checked when it was read).
            return self.loaded.edges, key
        self.loaded = None  # drop the previous bucket's edges before holding the new ones
        edges = source.load_chunk(bucket, iteration.edge_chunk_idx, iteration.num_edge_chunks, shared=True)
        self._check(edges, iteration.edge_path, bucket)
        edges.share_memory_()  # no-op for the columns already read into shared memory
        return edges, key

    def evaluate(self, phase: str) -> dict[str, Any] | None:
        """Evaluate the held-out edges ("before" or "after" training); None if there are none."""
        loaded = self._require_edges()
        if len(loaded.eval_idx) == 0:
            return None
        started = time.perf_counter()
        stats = self._run_jobs(worker_jobs.eval_job, loaded.eval_idx, f"eval_{phase}", shuffle=False)
        record = self._record()
        setattr(record, f"eval_{phase}", stats)
        record.timing[f"eval_{phase}"] = time.perf_counter() - started
        # PBG's "Stats before training" / "Stats after training" of the held-out edges.
        logger.info(
            "%s: bucket %s: held-out stats %s training: %s", self._label(), tuple(record.bucket), phase, stats.format()
        )
        return stats.to_dict()

    def train(self) -> dict[str, Any]:
        """HOGWILD training of the current bucket; raises on a NaN/infinite loss."""
        loaded = self._require_edges()
        record = self._record()
        where, count = f"{self._label()}: bucket {tuple(record.bucket)}", len(loaded.train_idx)
        logger.info("%s: training %d edges on %d workers", where, count, self.workers.num_workers, extra=STEP)
        self._read_ahead(record)
        started = time.perf_counter()
        stats = self._run_jobs(worker_jobs.train_job, loaded.train_idx, "train", shuffle=True)
        record.timing["train"] = time.perf_counter() - started
        record.train = stats
        loss = stats.metrics.get("loss", 0.0)
        if not math.isfinite(loss):
            raise TrainingDivergedError(
                f"loss became {loss} while training bucket {record.bucket} of "
                f"{self._require_iteration().label}; the last committed checkpoint is version "
                f"{self.residency.committed_version}, left intact (lower lr or check the input weights)"
            )
        self.residency.mark_dirty(self.settings.bucket_partitions(record.bucket), record.position)
        self.residency.mark_dirty(self.settings.unpartitioned_keys(), record.position)
        self.model_state.dirty = True
        seconds = record.timing["train"]
        rate = stats.count / max(seconds, 1e-9)
        logger.info(
            "%s: trained %d edges in %.2f s (%.0f edges/s); %s", where, stats.count, seconds, rate, stats.format()
        )
        return stats.to_dict()

    def _read_ahead(self, record: BucketRecord) -> None:
        """Start reading the next bucket's partitions (those with a free slot) while this one trains."""
        following = record.position + 1
        if self.progress is not None and following < len(self.progress.order):
            self.residency.prefetch(self.settings.bucket_partitions(self.progress.order[following]))

    def finish_bucket(self) -> dict[str, Any]:
        """Make the trained bucket durable at a save point (see :mod:`pbg_core.session.save_points`).

        At a save point: save the resident partitions trained since the last one (into this
        bucket's progress area, or the version's own names for the last bucket of the pass or
        without a progress store) and the model, then replace the record. The record is
        replaced only once everything it names is saved, and adopted in memory only once
        written, so a retry after a failure redoes what is missing and a retry after success
        does nothing. Between save points the bucket's row is held for the next one.
        """
        record, progress, iteration = self._record(), self._require_progress(), self._require_iteration()
        if record.train is None:
            raise RuntimeError(f"bucket {record.bucket} is not trained: call train() first")
        if progress.done > record.position:
            index = self._row(record, iteration)["index"]
            done_row = next((r for r in progress.rows if r["index"] == index), None)
            return {"bucket": list(record.bucket), "saved": [], "seconds": 0.0, "row": done_row, "recorded": True}
        last = record.position == len(progress.order) - 1
        dirty_bytes = self.residency.dirty_bytes() + (self.model_state.nbytes() if self.model_state.dirty else 0)
        due = self.save_points.due(dirty_bytes, sum(record.timing.values()), last)
        started, saved = time.perf_counter(), []
        if due:
            logger.info(
                "%s: bucket %s: saving its partitions and progress", iteration.label, tuple(record.bucket), extra=STEP
            )
            saved = self._save_changes(record.position, last, iteration)
        self.residency.collect()  # reads ahead and writes behind finished by now count for this bucket
        record.timing["save"] = time.perf_counter() - started if due else 0.0
        record.io = self.residency.io.as_dict()
        row = self._row(record, iteration)
        self.save_points.hold(row)
        if due:
            self._record_progress(record.position, progress, iteration)
        return {
            "bucket": list(record.bucket),
            "saved": saved,
            "seconds": record.timing["save"],
            "row": row,
            "recorded": due,
        }

    def _save_changes(self, position: int, last: bool, iteration: Iteration) -> list[str]:
        """Save the partitions and the model changed since the last save point."""
        # The last bucket of a pass saves straight to the version's own names (nothing
        # references them before the commit): no copy of its partitions at write_checkpoint.
        where = FINAL if last or self.progress_store is None else position
        saved = self.residency.save_dirty(where)
        if self.model_state.dirty:
            self.model_state.save(self._area(where), iteration.version, self.residency.metadata())
            self.model_where = where
        return [f"{e}/{p}" for e, p in saved]

    def _record_progress(self, position: int, progress: PassProgress, iteration: Iteration) -> None:
        """Replace the record: the buckets up to ``position`` are done, their saves named."""
        rows = self.save_points.held
        updated = replace(
            progress,
            done=position + 1,
            partitions=dict(self.residency.locations),
            model=self.model_where,
            rows=[r for r in progress.rows if r["index"] not in rows] + [rows[i] for i in sorted(rows)],
        )
        if self.progress_store is not None:
            self.progress_store.write(updated)
            keep = {w for w in [*updated.partitions.values(), updated.model] if w is not None and w != FINAL}
            self.progress_store.prune(iteration.version, keep)
        self.progress = updated
        self.save_points.take()

    # ---- checkpoint steps ----------------------------------------------------------------
    def write_checkpoint(self, iteration: Iteration) -> int:
        """Write every partition, the model and the stats rows as version ``iteration.version``."""
        if self.residency.committed_version >= iteration.version:
            return iteration.version  # already committed (a retried step)
        progress = self._require_progress()
        logger.info("%s: writing checkpoint version %d", iteration.label, iteration.version, extra=STEP)
        all_keys = [*self.settings.partitioned_keys(), *self.settings.unpartitioned_keys()]
        self.residency.complete_open_version(all_keys)
        if self.model_promoted() and self.progress_store is not None and progress.model is not None:
            self.progress_store.promote(iteration.version, progress.model, None, 0)
        elif self.model_state.dirty or progress.model is None:
            self.model_state.save(self.store, iteration.version, self.residency.metadata())
        rows = list(progress.rows)
        average = chunk_average_row(rows, iteration)
        self.stats_sink.write(rows if average is None else [*rows, average])
        return iteration.version

    def model_promoted(self) -> bool:
        """Whether ``write_checkpoint`` promotes the model's progress-area save (no new bytes) instead of writing."""
        model = self.progress.model if self.progress is not None else None
        return not self.model_state.dirty and model not in (None, FINAL) and self.progress_store is not None

    def switch_version(self, iteration: Iteration) -> int:
        """Commit once the version is found complete: write the version pointer (atomic), then treat
        memory as that version (a pointer never names a version whose files are not all there)."""
        logger.info("%s: committing version %d", iteration.label, iteration.version, extra=STEP)
        kept = self.store.check_complete(iteration.version, self.layout)
        self.store.write_version(iteration.version)
        self.residency.commit(iteration.version)
        self.model_where, self.kept = None, kept
        if self.progress_store is not None:
            self.progress_store.clear(kept)  # only after the pointer is durable
        return iteration.version

    def preserve_version(self, iteration: Iteration) -> int | None:
        """Snapshot the new version as ``epoch_{N}`` when the preservation interval says so."""
        epoch = should_preserve(iteration, self.settings.checkpoint_preservation_interval)
        if epoch is not None:
            self.store.preserve_version(self.kept, epoch)
        return epoch

    def remove_old_version(self, iteration: Iteration) -> int | None:
        """Delete every version older than the one just committed (never version 0).

        Normally that is the version this iteration started from; older ones are
        leftovers of a run killed while removing. Returns the newest version removed.
        """
        if iteration.version > 1:
            logger.info("%s: removing versions before %d", iteration.label, iteration.version, extra=STEP)
        return max(self.store.remove_versions_before(self.kept), default=None)

    def close(self) -> None:
        """Finish progress uploads in flight, stop the workers and release memory."""
        try:
            if self.progress_store is not None:
                self.progress_store.close()
        except Exception as exc:  # noqa: BLE001 - what is recorded locally is uploaded by the next start
            logger.warning("could not finish uploading the bucket progress: %s", exc)
        finally:
            self.workers.close()
            self.residency.release_all()

    # ---- helpers -------------------------------------------------------------------------
    def evaluate_edges(self, bucket: Bucket, edges: EdgeList, filter_index: Any = None, where: str = "") -> Stats:
        """Offline evaluation of ``edges`` of the resident ``bucket`` (config negatives, no holdout)."""
        self._check(edges, where or "edges", bucket)
        edges.share_memory_()
        job = (self.workers, self.settings, self.residency, self.seed, worker_jobs.eval_job, bucket, edges)
        return dispatch(*job, torch.arange(len(edges)), ("offline", *bucket), "offline", filter_index)

    def _check(self, edges: EdgeList, where: str, bucket: Bucket) -> None:
        settings = self.settings
        sides, partitions, featurized = settings.relation_sides, settings.partition_of(bucket), settings.featurized
        check_edges(edges, where, bucket, sides, partitions, self.residency.counts, featurized)

    def _run_jobs(self, job: Any, indices: torch.Tensor, purpose: str, shuffle: bool) -> Stats:
        record, iteration = self._record(), self._require_iteration()
        if shuffle:
            indices = shuffled(indices, self.seed, iteration, record.bucket)
        mode = "train" if purpose == "train" else "holdout"
        tag = (purpose, iteration.index, *record.bucket)
        edges = self._require_edges().edges
        return dispatch(
            self.workers, self.settings, self.residency, self.seed, job, record.bucket, edges, indices, tag, mode
        )

    def _row(self, record: BucketRecord, iteration: Iteration) -> dict[str, Any]:
        return bucket_row(record, iteration, self.buckets_in_pass)

    def _label(self) -> str:
        return self.iteration.label if self.iteration is not None else "evaluation"

    def _area(self, where: int) -> Any:
        """The store a save at ``where`` goes to (a progress area, or the checkpoint for FINAL)."""
        if self.progress_store is None or where == FINAL:
            return self.store
        return self.progress_store.area(self._require_iteration().version, where)

    def _require_progress(self) -> PassProgress:
        if self.progress is None:
            raise RuntimeError("no pass is open: call schedule_buckets(iteration) first")
        return self.progress

    def _record(self) -> BucketRecord:
        if self.current is None:
            raise RuntimeError("no bucket is open: call swap_partitions(bucket) first")
        return self.current

    def _require_edges(self) -> LoadedEdges:
        if self.loaded is None:
            raise RuntimeError("no edges are loaded: call load_edges(bucket) first")
        return self.loaded

    def _require_iteration(self) -> Iteration:
        if self.iteration is None:
            raise RuntimeError("no iteration is open: call schedule_buckets(iteration) first")
        return self.iteration
