"""What happened to each bucket of a pass, and the stats rows it becomes.

:class:`BucketRecord` collects one bucket's train and held-out stats, timings and I/O
figures while the session works on it; :func:`bucket_row` turns it into the row
``training_stats.json`` holds (PBG's fields plus ``timing`` and ``io``), and
:func:`chunk_average_row` adds PBG's per-chunk average of the held-out stats.
:class:`LoadedEdges` is the bucket chunk the session holds in shared memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.evaluation.metrics import chunk_eval_average
from pbg_core.session.iterations import Iteration
from pbg_core.stats import Stats
from pbg_core.types import Bucket


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
    key: tuple[Any, ...] = ()  # (edge path, chunk, chunks, bucket, file stamp) it was read for


def bucket_row(record: BucketRecord, iteration: Iteration, buckets_in_pass: int) -> dict[str, Any]:
    """The stats row of ``record``: its index in the whole run is iteration x buckets + position."""
    row: dict[str, Any] = {
        "lhs_partition": record.bucket.lhs,
        "rhs_partition": record.bucket.rhs,
        "index": iteration.index * buckets_in_pass + record.position,
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


def chunk_average_row(rows: Sequence[dict[str, Any]], iteration: Iteration) -> dict[str, Any] | None:
    """PBG's ``eval_stats_chunk_avg`` row after a pass's bucket ``rows``; None without held-out stats."""
    chunk_avg = chunk_eval_average(
        Stats.from_dict(row["eval_stats_before"]) if "eval_stats_before" in row else None for row in rows
    )
    if chunk_avg is None or not rows:
        return None
    return {
        "epoch_idx": iteration.epoch_idx,
        "edge_path_idx": iteration.edge_path_idx,
        "edge_chunk_idx": iteration.edge_chunk_idx,
        "index": rows[-1]["index"],
        "eval_stats_chunk_avg": chunk_avg.to_dict(),
    }
