"""Free-space checks at the start of the steps that write checkpoint files (local checkpoints only).

What each step writes, and so what it needs free (:func:`storage.disk_space.check_disk_space`):

- ``swap-partitions`` and ``finish-bucket``: every dirty resident partition (embeddings and
  row-Adagrad state) and the model when it changed, plus :data:`FILE_SLACK` per file: exactly
  what :meth:`~pbg_core.session.residency.PartitionResidency.save_dirty` may write (a swap
  saves only the leaving ones: counting all dirty ones errs on the safe side).
- ``write-checkpoint``: the whole version ``v + 1`` (every partition and the model), minus what
  it promotes from the bucket progress area (hard links on local disk: no new bytes; see
  :meth:`~pbg_core.session.residency.PartitionResidency.promoted_keys`) and minus the ``v + 1``
  files already written (the last bucket's saves, an earlier attempt's writes).

One check per step, not per file: a step that would run out of space fails before its first
write, and the committed version ``v`` is never written to either way.
"""

from __future__ import annotations

from pbg_core.config import ConfigSchema
from pbg_core.session.engine import TrainingSession
from pbg_core.session.iterations import Iteration
from pbg_core.session.memory_plan import row_bytes
from storage.disk_space import check_disk_space, version_bytes_on_disk

FILE_SLACK = 64 * 1024  # an HDF5 file's metadata, attributes and pickled optimizer state header


def model_bytes(session: TrainingSession) -> int:
    """The model's parameters and their Adagrad sums, as saved."""
    return 8 * sum(p.numel() for p in session.model_state.model.parameters()) + FILE_SLACK


def dirty_bytes(session: TrainingSession) -> int:
    """What saving every dirty resident partition (and the model, if changed) writes."""
    residency = session.residency
    files = sum(1 for key in residency.dirty if key in residency.resident)
    total = residency.dirty_bytes() + files * FILE_SLACK
    return total + (model_bytes(session) if session.model_state.dirty else 0)


def completion_bytes(session: TrainingSession, config: ConfigSchema) -> int:
    """What ``write-checkpoint`` writes: every partition (embeddings and row-Adagrad state) and the
    model, except those promoted from a progress-area save."""
    counts = session.residency.counts
    promoted = set(session.residency.promoted_keys())
    written = {key: count for key, count in counts.items() if key not in promoted}
    partitions = sum(count * row_bytes(config.entity_dimension(entity)) for (entity, _), count in written.items())
    return partitions + len(written) * FILE_SLACK + (0 if session.model_promoted() else model_bytes(session))


def check_before_bucket_save(session: TrainingSession, checkpoint_path: str) -> None:
    """Before a swap or a bucket's progress save: room for every dirty partition and the model."""
    committed = session.residency.committed_version
    check_disk_space(
        checkpoint_path, dirty_bytes(session), committed, f"the bucket progress of version {committed + 1}"
    )


def check_before_checkpoint(session: TrainingSession, config: ConfigSchema, iteration: Iteration) -> None:
    """Before ``write-checkpoint``: room for the rest of version ``iteration.version``."""
    committed = session.residency.committed_version
    if committed >= iteration.version:
        return  # already committed: the step writes nothing
    present = version_bytes_on_disk(config.checkpoint_path, iteration.version)
    needed = completion_bytes(session, config) - present
    check_disk_space(config.checkpoint_path, needed, committed, f"checkpoint version {iteration.version}")
