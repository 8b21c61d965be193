"""How a bucket's edges are divided: the held-out split, the shuffle, one job per worker.

Every draw is seeded from the run's seed and what it is for (the bucket, the iteration,
the worker), so the same seed gives the same split, order and per-worker seeds.
"""

from __future__ import annotations

from typing import Any

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.parallel import worker_jobs
from pbg_core.parallel.hogwild import HogwildWorkers
from pbg_core.parallel.worker_boot import active_workers
from pbg_core.seeding import derive_seed, torch_generator
from pbg_core.session.iterations import Iteration
from pbg_core.session.parts import SessionSettings, split_evenly
from pbg_core.session.residency import PartitionResidency
from pbg_core.stats import Stats
from pbg_core.types import Bucket


def holdout_split(
    num_edges: int, eval_fraction: float, seed: int, iteration: Iteration, bucket: Bucket
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(train_idx, eval_idx)``: ``int(num_edges * eval_fraction)`` edges held out, the rest trained.

    The held-out edges are the same every epoch (seeded by edge path, chunk and bucket, not
    by epoch) and drawn without replacement: PBG samples with replacement, so it trained on
    some of them.
    """
    num_eval = int(num_edges * eval_fraction)
    if num_eval:
        gen = torch_generator(seed, "holdout", iteration.edge_path_idx, iteration.edge_chunk_idx, *bucket)
        perm = torch.randperm(num_edges, generator=gen)
    else:  # nothing held out: training shuffles its indices anyway
        perm = torch.arange(num_edges)
    return perm[num_eval:], perm[:num_eval]


def shuffled(indices: torch.Tensor, seed: int, iteration: Iteration, bucket: Bucket) -> torch.Tensor:
    """``indices`` in the training order of ``bucket`` in ``iteration`` (a new order every iteration)."""
    gen = torch_generator(seed, "shuffle", iteration.index, *bucket)
    return indices[torch.randperm(len(indices), generator=gen)]


def dispatch(
    workers: HogwildWorkers[Any],
    settings: SessionSettings,
    residency: PartitionResidency,
    seed: int,
    job: Any,
    bucket: Bucket,
    edges: EdgeList,
    indices: torch.Tensor,
    tag: tuple[Any, ...],
    mode: str,
    filter_index: Any = None,
) -> Stats:
    """Run ``job`` over ``indices`` of ``edges`` on the workers; the sum of their stats.

    Each worker gets a contiguous slice and a seed derived from ``tag`` and its index.
    ``mode`` is "train", "holdout" or "offline" (which negatives and batch size a worker uses).
    """
    slots = settings.slot_map(bucket, residency)
    num_workers = workers.num_workers
    # Training a small bucket on fewer workers avoids stale HOGWILD steps (worker_boot).
    active = active_workers(len(indices), settings.batch_size, num_workers) if mode == "train" else num_workers
    # Only active workers get a job: the children are started on the first job that needs them.
    slices = split_evenly(indices, active)
    args = [
        worker_jobs.JobArgs(
            slots=slots,
            edges=edges,
            indices=part,
            seed=derive_seed(seed, *tag, worker),
            mode=mode,
            filter_index=filter_index,
        )
        for worker, part in enumerate(slices)
    ]
    return Stats.sum(workers.run(job, args))
