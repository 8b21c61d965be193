"""Starting a pass: resume the recorded progress of an interrupted run, or start afresh.

A crash loses at most the bucket in flight: ``finish_bucket`` records each finished bucket
(:class:`~pbg_core.ports.PassProgress`) with where its partitions and the model were saved,
and the next session of the same pass picks up from there.
"""

from __future__ import annotations

import logging

from pbg_core.ports import FINAL, CompleteVersion, PartitionStore, PassProgress, ProgressStore, VersionedStore
from pbg_core.session.iterations import Iteration
from pbg_core.session.parts import ModelState
from pbg_core.session.residency import PartitionResidency
from pbg_core.types import Bucket

logger = logging.getLogger(__name__)


def resume_or_start(
    iteration: Iteration,
    order: list[Bucket],
    progress_store: ProgressStore | None,
    residency: PartitionResidency,
    model_state: ModelState,
    store: VersionedStore,
    committed: CompleteVersion,
) -> tuple[PassProgress, int | None]:
    """The pass's progress and where the model's latest save of it is (None: not saved).

    ``committed``: evidence that the committed version is complete; stale records and areas are
    deleted only with it (docs/checkpoint-protocol.md, "Deleting").

    The recorded progress of this pass if it matches (the partitions and the model are
    restored to what its last bucket left), else a fresh one (stale records deleted, and the
    partitions and model put back to the committed version if an abandoned pass changed them).

    A record of the same pass over the same buckets is resumed in its own order, even when this
    session drew another one: without a configured ``seed`` every session draws a new seed, and
    so a new order, and starting the pass over would lose every bucket the crash spared. Any
    order of the pass's buckets is a valid pass; the record's is the one its saves belong to.
    """
    fresh = PassProgress(version=iteration.version, iteration_index=iteration.index, order=order)
    if progress_store is None:
        return fresh, None
    saved = progress_store.read(iteration.version)
    if saved is not None and saved.iteration_index == iteration.index and sorted(saved.order) == sorted(order):
        progress_store.clear(committed, keep_open=True)  # other versions' records
        _resume(iteration, order, saved, progress_store, residency, model_state, store)
        return saved, saved.model
    if saved is not None:
        logger.warning(
            "discarding recorded progress of version %d: it is for iteration %d over buckets %s, "
            "not iteration %d over buckets %s",
            iteration.version,
            saved.iteration_index,
            sorted(saved.order),
            iteration.index,
            sorted(order),
        )
    progress_store.clear(committed)
    if residency.restore({}):
        # A pass abandoned in this process changed the model too: back to the committed one.
        model_state.restore(store, residency.committed_version, residency.init_store)
    return fresh, None


def _resume(
    iteration: Iteration,
    order: list[Bucket],
    saved: PassProgress,
    progress_store: ProgressStore,
    residency: PartitionResidency,
    model_state: ModelState,
    store: VersionedStore,
) -> None:
    """Adopt ``saved``: restore its partitions and model."""
    if saved.order != order:
        logger.info(
            "%s: resuming the recorded bucket order %s (this session drew %s: no seed is set)",
            iteration.label,
            saved.order,
            order,
        )
    residency.restore(saved.partitions)
    if saved.model is not None:
        area: PartitionStore = store if saved.model == FINAL else progress_store.area(iteration.version, saved.model)
        model_state.restore_saved(area, iteration.version)
    logger.info(
        "%s: resuming after bucket %d of %d (recorded progress of version %d)",
        iteration.label,
        saved.done,
        len(order),
        iteration.version,
    )
