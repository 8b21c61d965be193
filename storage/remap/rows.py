"""Move one entity type's trained rows to where their entities are now, a partition at a time.

An entity kept across a re-import may move to any partition, so a new partition gathers rows
from every old one. Holding every partition of a type at once is what big graphs cannot
afford; reading each old partition once per new partition costs P times the type's bytes. So
the rows move in two passes through a local spill directory:

1. each old partition is read once; the rows (and their row-Adagrad sums) of its entities that
   stay are written, grouped by the new partition they go to, as one ``.npz`` file per
   (new, old) partition pair;
2. each new partition is built alone: a fresh model's seeded start (the rows of entities
   ``init_path`` never trained keep it), then every spill file of that partition scattered in
   and deleted, then written as a checkpoint file.

Memory: the old or the new partition in hand, never two partitions of the type, plus the
:class:`~storage.remap.matching.Moves` (four int64 per kept entity). Disk: the kept rows once,
in the spill directory, while the type is being moved.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from pbg_core.ports import CheckpointMetadata, PartitionStore
from pbg_core.training.optimizers import RowAdagrad, state_from_bytes, state_to_bytes
from storage import layout
from storage.checkpoints import CheckpointStore
from storage.remap.matching import Moves

Start = Callable[[int, torch.Tensor], None]  # start(partition, rows): a fresh start of a whole new partition


@dataclass(frozen=True)
class Target:
    """Where one entity type's remapped partitions go and how new rows start.

    Attributes:
        store: The directory the partitions are written to (at ``version``).
        version: The version number they are written as (``init_path``'s).
        counts: Entities per partition now.
        dimension: The embedding dimension.
        start: Fills a new partition with a fresh model's start (seeded per partition).
        lr: The embedding learning rate recorded with the row-Adagrad state (PBG's format).
        metadata: Attributes of the written files (their names record: the names now).
    """

    store: CheckpointStore
    version: int
    counts: tuple[int, ...]
    dimension: int
    start: Start
    lr: float
    metadata: CheckpointMetadata


def move_rows(
    entity: str, moves: Moves, source: PartitionStore, version: int, target: Target, spill_dir: str
) -> dict[int, torch.Tensor]:
    """Write ``entity``'s partitions as they are now, rows of kept entities from ``source`` at ``version``.

    Returns:
        Per new partition, the sorted offsets of its rows that ``source`` never trained.
    """
    os.makedirs(spill_dir, exist_ok=True)
    for name in os.listdir(spill_dir):  # an interrupted attempt's pieces: never scattered into this one
        os.remove(os.path.join(spill_dir, name))
    _spill(entity, moves, source, version, spill_dir)
    fresh = {}
    for part, count in enumerate(target.counts):
        embeddings = torch.empty(count, target.dimension)
        target.start(part, embeddings)
        sums = torch.zeros(count)
        trained = torch.zeros(count, dtype=torch.bool)
        for name in sorted(n for n in os.listdir(spill_dir) if n.startswith(f"to{part}-")):
            path = os.path.join(spill_dir, name)
            with np.load(path) as piece:
                offsets = torch.from_numpy(piece["offsets"])
                embeddings[offsets] = torch.from_numpy(piece["rows"])
                sums[offsets] = torch.from_numpy(piece["sums"])
            trained[offsets] = True
            os.remove(path)
        state = state_to_bytes(RowAdagrad.state_dict(sums, target.lr))
        target.store.save_embeddings(entity, part, target.version, embeddings, state, target.metadata)
        fresh[part] = torch.nonzero(~trained).flatten()
    return fresh


def _spill(entity: str, moves: Moves, source: PartitionStore, version: int, spill_dir: str) -> None:
    """Pass 1: read each old partition once; spill its kept rows per new partition."""
    order = np.lexsort((moves.new_part, moves.old_part))
    old_part, new_part = moves.old_part[order], moves.new_part[order]
    old_offset, new_offset = moves.old_offset[order], moves.new_offset[order]
    # Boundaries of the runs of equal (old partition, new partition).
    changes = np.flatnonzero((np.diff(old_part) != 0) | (np.diff(new_part) != 0)) + 1
    bounds = [0, *changes.tolist(), len(order)] if len(order) else [0]
    loaded: tuple[int, torch.Tensor, torch.Tensor] | None = None
    for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
        old, new = int(old_part[begin]), int(new_part[begin])
        if loaded is None or loaded[0] != old:
            loaded = None  # the previous old partition goes before the next is read
            loaded = (old, *_load(source, entity, old, version))
        _, embeddings, sums = loaded
        rows = torch.from_numpy(old_offset[begin:end])
        np.savez(
            os.path.join(spill_dir, layout.remap_spill_file(new, old)),
            offsets=new_offset[begin:end],
            rows=embeddings[rows].numpy(),
            sums=sums[rows].numpy(),
        )


def _load(source: PartitionStore, entity: str, part: int, version: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An old partition's rows and row-Adagrad sums (zeros when it has none of that shape)."""
    embeddings, optim = source.load_embeddings(entity, part, version)
    sums = torch.zeros(len(embeddings))
    if optim is not None:
        RowAdagrad.load_state_dict(state_from_bytes(optim), sums)  # left at 0 when it holds none of that shape
    return embeddings, sums


__all__ = ["Start", "Target", "move_rows"]
