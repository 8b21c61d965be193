"""The training session: the one in-process owner of live training state.

A :class:`TrainingSession` holds the model, the shared-memory embedding slots,
the HOGWILD worker pool and the current bucket's edges for a whole run. The
orchestration layer drives it one step at a time (each step is one Prefect
task) and only ever passes it small values:

    schedule_buckets -> for each bucket: swap_partitions -> load_edges ->
    evaluate("before") -> train -> evaluate("after")
    then: write_checkpoint -> switch_version -> preserve_version -> remove_old_version

Checkpoint protocol: while version ``v`` is committed, every write goes to
``v + 1`` names; ``switch_version`` writes the pointer last, so a crash before
it leaves ``v`` intact.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from pbg_core.bucket_order import BUCKET_ORDERS
from pbg_core.edge_checks import check_edges
from pbg_core.edgelist import EdgeList
from pbg_core.errors import TrainingDivergedError
from pbg_core.evaluation import chunk_eval_average
from pbg_core.hogwild import HogwildWorkers
from pbg_core.memory import release_free_memory
from pbg_core.iterations import Iteration, should_preserve
from pbg_core.ports import EdgeSource, StatsSink, VersionedStore
from pbg_core.residency import PartitionKey, PartitionResidency
from pbg_core.seeding import derive_seed, python_rng, torch_generator
from pbg_core.session_parts import ModelState, SessionSettings, split_evenly
from pbg_core.stats import Stats
from pbg_core.types import Bucket
from pbg_core import worker_jobs

logger = logging.getLogger(__name__)


@dataclass
class BucketRecord:
    """What happened to one bucket in the open iteration (becomes a stats row)."""

    bucket: Bucket
    position: int
    train: Stats | None = None
    eval_before: Stats | None = None
    eval_after: Stats | None = None
    timing: dict[str, float] = field(default_factory=dict)
    io: dict[str, float] = field(default_factory=dict)


@dataclass
class LoadedEdges:
    """The current bucket chunk in shared memory, split into train and eval indices."""

    edges: EdgeList
    train_idx: torch.Tensor
    eval_idx: torch.Tensor


@dataclass
class TrainingSession:
    """Live state of one training run. Build it with :func:`pbg_core.session_build.open_session`."""

    settings: SessionSettings
    model_state: ModelState
    residency: PartitionResidency
    workers: HogwildWorkers
    store: VersionedStore
    edge_sources: list[EdgeSource]
    stats_sink: StatsSink
    seed: int
    records: list[BucketRecord] = field(default_factory=list)
    current: BucketRecord | None = None
    loaded: LoadedEdges | None = None
    iteration: Iteration | None = None
    buckets_in_pass: int = 0

    # ---- per iteration -------------------------------------------------------------------
    def schedule_buckets(self, iteration: Iteration) -> list[Bucket]:
        """The bucket order for this pass (seeded per iteration); starts the pass."""
        order = BUCKET_ORDERS.get(self.settings.bucket_order)
        rng = python_rng(self.seed, "bucket_order", iteration.index)
        buckets = list(order(self.settings.nparts_lhs, self.settings.nparts_rhs, rng))
        self.iteration = iteration
        self.residency.metadata.iteration = iteration.metadata()
        self.records = []
        self.buckets_in_pass = len(buckets)
        return buckets

    # ---- per bucket ----------------------------------------------------------------------
    def swap_partitions(self, bucket: Bucket) -> dict[str, float]:
        """Save partitions leaving memory, load those this bucket needs; returns IO figures."""
        self.current = BucketRecord(bucket=bucket, position=len(self.records))
        self.records.append(self.current)
        self.residency.io.reset()
        needed = set(self.settings.bucket_partitions(bucket))
        self.residency.evict_except(needed, self.settings.partitioned_keys())
        self.residency.ensure_resident(sorted(needed))
        self.current.io = self.residency.io.as_dict()
        return self.current.io

    def load_edges(self, bucket: Bucket) -> dict[str, int]:
        """Load this iteration's chunk of ``bucket`` and hold out the eval fraction."""
        iteration = self._require_iteration()
        started = time.perf_counter()
        source = self.edge_sources[iteration.edge_path_idx]
        edges = source.load_chunk(bucket, iteration.edge_chunk_idx, iteration.num_edge_chunks, shared=True)
        self._check(edges, iteration.edge_path, bucket)
        edges.share_memory_()  # no-op for the columns already read into shared memory
        num_eval = int(len(edges) * self.settings.eval_fraction)
        # Fixed across epochs (the same edges are held out every time) and drawn
        # without replacement: PBG samples with replacement, so it trained on some.
        gen = torch_generator(self.seed, "holdout", iteration.edge_path_idx, iteration.edge_chunk_idx, *bucket)
        perm = torch.randperm(len(edges), generator=gen)
        self.loaded = None  # drop the previous bucket's edges before holding the new ones
        self.loaded = LoadedEdges(edges=edges, train_idx=perm[num_eval:], eval_idx=perm[:num_eval])
        release_free_memory()
        self._record().timing["load_edges"] = time.perf_counter() - started
        return {"edges": len(edges), "train": len(edges) - num_eval, "eval": num_eval}

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
        return stats.to_dict()

    def train(self) -> dict[str, Any]:
        """HOGWILD training of the current bucket; raises on a NaN/infinite loss."""
        loaded = self._require_edges()
        record = self._record()
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
        self.residency.mark_dirty(self.settings.bucket_partitions(record.bucket))
        self.residency.mark_dirty(self.settings.unpartitioned_keys())
        self.model_state.dirty = True
        seconds = record.timing["train"]
        logger.info(
            "bucket %s: trained %d edges in %.2f s (%.0f edges/s); %s",
            record.bucket, stats.count, seconds, stats.count / max(seconds, 1e-9), stats.format(),
        )
        return stats.to_dict()

    # ---- checkpoint steps ----------------------------------------------------------------
    def write_checkpoint(self, iteration: Iteration) -> int:
        """Write every partition, the model and the stats rows as version ``iteration.version``."""
        if self.residency.committed_version >= iteration.version:
            return iteration.version  # already committed (a retried step)
        all_keys = [*self.settings.partitioned_keys(), *self.settings.unpartitioned_keys()]
        self.residency.complete_open_version(all_keys)
        self.model_state.save(self.store, iteration.version, self.residency.metadata())
        rows = [self._row(record, iteration) for record in self.records]
        chunk_avg = chunk_eval_average(record.eval_before for record in self.records)
        if chunk_avg is not None and rows:
            rows.append({
                "epoch_idx": iteration.epoch_idx, "edge_path_idx": iteration.edge_path_idx,
                "edge_chunk_idx": iteration.edge_chunk_idx, "index": rows[-1]["index"],
                "eval_stats_chunk_avg": chunk_avg.to_dict(),
            })
        self.stats_sink.write(rows)
        return iteration.version

    def switch_version(self, iteration: Iteration) -> int:
        """Commit: write the version pointer (atomic), then treat memory as that version."""
        self.store.write_version(iteration.version)
        self.residency.commit(iteration.version)
        return iteration.version

    def preserve_version(self, iteration: Iteration) -> int | None:
        """Snapshot the new version as ``epoch_{N}`` when the preservation interval says so."""
        epoch = should_preserve(iteration, self.settings.checkpoint_preservation_interval)
        if epoch is not None:
            self.store.preserve_version(iteration.version, epoch)
        return epoch

    def remove_old_version(self, iteration: Iteration) -> int | None:
        """Delete the version this iteration started from (never version 0)."""
        old = iteration.version - 1
        if old < 1:
            return None
        self.store.remove_version(old)
        return old

    def close(self) -> None:
        """Stop the workers and release memory."""
        self.workers.close()
        self.residency.release_all()

    # ---- helpers -------------------------------------------------------------------------
    def evaluate_edges(self, bucket: Bucket, edges: EdgeList, filter_index: Any = None, where: str = "") -> Stats:
        """Offline evaluation of ``edges`` of the resident ``bucket`` (config negatives, no holdout)."""
        self._check(edges, where or "edges", bucket)
        edges.share_memory_()
        indices = torch.arange(len(edges))
        return self._dispatch(worker_jobs.eval_job, bucket, edges, indices, ("offline", *bucket), "offline",
                              filter_index)

    def _check(self, edges: EdgeList, where: str, bucket: Bucket) -> None:
        check_edges(
            edges, where, bucket, self.settings.relation_sides, self.settings.partition_of(bucket),
            self.residency.counts, self.settings.featurized,
        )

    def _run_jobs(self, job: Any, indices: torch.Tensor, purpose: str, shuffle: bool) -> Stats:
        record = self._record()
        iteration = self._require_iteration()
        if shuffle:
            gen = torch_generator(self.seed, "shuffle", iteration.index, *record.bucket)
            indices = indices[torch.randperm(len(indices), generator=gen)]
        mode = "train" if purpose == "train" else "holdout"
        tag = (purpose, iteration.index, *record.bucket)
        return self._dispatch(job, record.bucket, self._require_edges().edges, indices, tag, mode, None)

    def _dispatch(
        self, job: Any, bucket: Bucket, edges: EdgeList, indices: torch.Tensor, tag: tuple[Any, ...],
        mode: str, filter_index: Any,
    ) -> Stats:
        slots = self.settings.slot_map(bucket, self.residency)
        slices = split_evenly(indices, self.workers.num_workers)
        args = [
            worker_jobs.JobArgs(
                slots=slots, edges=edges, indices=part, seed=derive_seed(self.seed, *tag, worker),
                mode=mode, filter_index=filter_index,
            )
            for worker, part in enumerate(slices)
        ]
        return Stats.sum(self.workers.run(job, args))

    def _row(self, record: BucketRecord, iteration: Iteration) -> dict[str, Any]:
        row: dict[str, Any] = {
            "lhs_partition": record.bucket.lhs,
            "rhs_partition": record.bucket.rhs,
            "index": iteration.index * self.buckets_in_pass + record.position,
            "stats": (record.train or Stats()).to_dict(),
            "epoch_idx": iteration.epoch_idx,
            "edge_path_idx": iteration.edge_path_idx,
            "edge_chunk_idx": iteration.edge_chunk_idx,
            "timing": record.timing,
            "io": record.io,
        }
        if record.eval_before is not None:
            row["eval_stats_before"] = record.eval_before.to_dict()
        if record.eval_after is not None:
            row["eval_stats_after"] = record.eval_after.to_dict()
        return row

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

