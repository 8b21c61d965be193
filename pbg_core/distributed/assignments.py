"""What the coordinator sends a machine with a bucket, and what the machine sends back.

Both cross the wire (Dask pickles them): plain values and CPU tensors, never a live object.
A partition's *stamp* ``(open version, progress area)`` names one saved state of it; a machine
keeps a partition in memory between buckets only while its stamp is the coordinator's (no one
else trained it since), and reads it from its latest save otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from pbg_core.session.iterations import Iteration
from pbg_core.types import Bucket, PartitionKey

Stamp = tuple[int, int]  # (open version, progress area) of a partition's save


@dataclass(frozen=True)
class Assignment:
    """One bucket for one machine.

    Attributes:
        iteration: The pass it belongs to.
        bucket: The bucket to train.
        area: The progress area its partitions are saved into (unique in the pass).
        committed_version: The checkpoint's committed version (saves go to the next one).
        locations: (entity, partition) -> progress area of its latest save in this pass.
        stamps: The latest stamp of every partition (absent: never saved by a machine).
        shared: The coordinator's copy of the shared parameters (:mod:`.shared_state`).
        evaluate: Rank the bucket's held-out edges before and after training.
    """

    iteration: Iteration
    bucket: Bucket
    area: int
    committed_version: int
    locations: dict[PartitionKey, int]
    stamps: dict[PartitionKey, Stamp]
    shared: dict[str, torch.Tensor]
    evaluate: bool


@dataclass
class Outcome:
    """A trained bucket, its partitions durably saved in the assignment's area.

    Attributes:
        bucket: The bucket trained.
        area: Where its partitions were saved.
        saved: The partitions saved there.
        delta: What training changed in the shared parameters.
        train: Training stats (``Stats.to_dict``).
        eval_before: Held-out stats before training, if evaluated.
        eval_after: Held-out stats after training, if evaluated.
        timing: Seconds per step.
        io: Bytes and seconds of partition I/O.
        logs: The machine's log lines of this bucket, for the run's logs: (line, is a step line).
    """

    bucket: Bucket
    area: int
    saved: list[PartitionKey]
    delta: dict[str, torch.Tensor]
    train: dict[str, Any]
    eval_before: dict[str, Any] | None = None
    eval_after: dict[str, Any] | None = None
    timing: dict[str, float] = field(default_factory=dict)
    io: dict[str, float] = field(default_factory=dict)
    logs: list[tuple[str, bool]] = field(default_factory=list)
