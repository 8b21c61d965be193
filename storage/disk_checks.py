"""Free-space checks at the start of the steps that write checkpoint files (local checkpoints only).

Each step needs room for what it writes, counted as disk blocks (an upper bound, measured:
:func:`storage.disk_space.hdf5_file_bytes`), every file whole, since it is written under a
temporary name beside the file it replaces, which keeps its blocks until the rename:

- ``swap-partitions`` and ``finish-bucket``: every dirty resident partition (embeddings and
  row-Adagrad state) and the model when it changed, and the progress record rewritten with
  the rows held since the last one: what
  :meth:`~pbg_core.session.residency.PartitionResidency.save_dirty` may write (a swap saves
  only the leaving ones: counting all dirty ones errs on the safe side).
- ``write-checkpoint``: the partitions and the model it writes (those not already under the
  version's names and not promoted from a progress area: a hard link on local disk takes no
  room; see :meth:`~pbg_core.session.residency.PartitionResidency.written_at_completion`), and
  ``training_stats.json`` rewritten with the pass's rows.
- ``preserve-version``: a copy of every file of the version (real copies, hard-linked files
  included) into ``epoch_{N}/``.

One check per step, not per file: a step that would run out of space fails before its first
write, and the committed version ``v`` is never written to either way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from pbg_core.config import ConfigSchema
from pbg_core.session.engine import TrainingSession
from pbg_core.session.iterations import Iteration
from pbg_core.types import PartitionKey
from storage import layout
from storage.config_loader import local_path
from storage.disk_space import attrs_bytes, check_disk_space, hdf5_file_bytes, rewrite_bytes, version_files_bytes


def partition_bytes(session: TrainingSession, keys: Iterable[PartitionKey]) -> int:
    """The files of these partitions (float32 embeddings and row-Adagrad sums) as saved."""
    attrs, total = attrs_bytes(session.residency.metadata.config_json), 0
    for key in keys:
        shape = session.layout.embeddings[key]
        if shape is None:  # a session's layout always has them (pbg_core.session.build)
            raise ValueError(f"no shape of {key} in the session's version layout")
        total += hdf5_file_bytes(shape[0] * (shape[1] + 1) * 4, attrs)
    return total


def model_bytes(session: TrainingSession) -> int:
    """The model file: its parameters and their Adagrad sums, a dataset per parameter."""
    parameters = list(session.model_state.model.parameters())
    data = 8 * sum(p.numel() for p in parameters)
    return hdf5_file_bytes(data, attrs_bytes(session.residency.metadata.config_json), len(parameters) + 1)


def dirty_bytes(session: TrainingSession, checkpoint_path: str) -> int:
    """What saving every dirty resident partition (and the model, if changed) and the record writes."""
    residency = session.residency
    total = partition_bytes(session, [key for key in residency.dirty if key in residency.resident])
    total += model_bytes(session) if session.model_state.dirty else 0
    # The record grows by the rows held since the last one, this bucket's (2 KiB at most) and where
    # each partition is (32 bytes each at most).
    held = sum(len(json.dumps(row)) + 1 for row in session.save_points.held.values())
    added = held + 2048 + 32 * len(residency.counts) + 1024
    return total + _rewrite(
        checkpoint_path, [layout.PROGRESS_DIR, layout.progress_record_file(residency.open_version)], added
    )


def completion_bytes(session: TrainingSession, config: ConfigSchema) -> int:
    """What ``write-checkpoint`` writes: the partitions and the model not yet under the version's names
    (nor promoted from a progress-area save), and ``training_stats.json`` with the pass's rows."""
    all_keys = [*session.settings.partitioned_keys(), *session.settings.unpartitioned_keys()]
    total = partition_bytes(session, session.residency.written_at_completion(all_keys))
    progress = session.progress
    model_written = not session.model_promoted() and (
        session.model_state.dirty or progress is None or progress.model is None
    )
    total += model_bytes(session) if model_written else 0
    rows = list(progress.rows) if progress is not None else []
    added = sum(len(json.dumps(row)) + 1 for row in rows) + max((len(json.dumps(r)) for r in rows), default=0) + 1024
    return total + _rewrite(config.checkpoint_path, [layout.STATS_FILE], added)


def check_before_bucket_save(session: TrainingSession, checkpoint_path: str) -> None:
    """Before a swap or a bucket's progress save: room for every dirty partition, the model and the record."""
    committed = session.residency.committed_version
    needed = dirty_bytes(session, checkpoint_path)
    check_disk_space(checkpoint_path, needed, committed, f"the bucket progress of version {committed + 1}")


def check_before_checkpoint(session: TrainingSession, config: ConfigSchema, iteration: Iteration) -> None:
    """Before ``write-checkpoint``: room for the rest of version ``iteration.version``."""
    committed = session.residency.committed_version
    if committed >= iteration.version:
        return  # already committed: the step writes nothing
    needed = completion_bytes(session, config)
    check_disk_space(config.checkpoint_path, needed, committed, f"checkpoint version {iteration.version}")


def check_before_snapshot(checkpoint_path: str, version: int, epoch: int) -> None:
    """Before copying ``version`` into ``epoch_{epoch}/``: room for a copy of each of its files."""
    needed = version_files_bytes(checkpoint_path, version) + 4096  # and the snapshot's version file
    check_disk_space(checkpoint_path, needed, version, f"the epoch_{epoch} snapshot of version {version}")


def _rewrite(checkpoint_path: str, parts: list[str], added: int) -> int:
    """:func:`~storage.disk_space.rewrite_bytes` of a file under a local checkpoint (0 when remote)."""
    local: Any = local_path(checkpoint_path)
    return 0 if local is None else rewrite_bytes(os.path.join(local, *parts), added)
