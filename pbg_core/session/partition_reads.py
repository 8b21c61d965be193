"""Filling a slot from where a partition's state is, and writing a slot: the I/O of residency.

Where a partition is read from is decided on the training thread (:func:`source_of`: it reads
the residency's bookkeeping); the reading itself (:func:`fill`) and writing (:func:`write`) touch
only the slot and the store they are given, so they may run on the partition I/O thread
(:mod:`pbg_core.session.partition_io`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from pbg_core.errors import PbgError, ShapeError
from pbg_core.parallel.memory import SlotHandle
from pbg_core.ports import FINAL, CheckpointMetadata, NewRowSource, PartitionStore
from pbg_core.seeding import torch_generator
from pbg_core.training.optimizers import RowAdagrad, state_from_bytes, state_to_bytes
from pbg_core.types import PartitionKey


@dataclass(frozen=True)
class Source:
    """Where a partition's state comes from: ``store`` at ``version``, or random (store None).

    ``grows``: the store may hold fewer rows than the partition has now (``init_path`` of a graph
    that has grown since by ``pbg import --append``): its rows are the first ones, the others
    start as a fresh model's would, or as ``new_rows`` gives them (neighbor means). ``new_rows``
    also gives the starts of rows an ``init_path`` remapped by name holds for entities it never
    trained (:mod:`storage.remap`): they are overwritten after the partition is read.
    """

    label: str
    store: PartitionStore | None = None
    version: int = 0
    grows: bool = False
    new_rows: NewRowSource | None = None


def source_of(
    key: PartitionKey,
    locations: dict[PartitionKey, int],
    target: Callable[[int], PartitionStore],
    open_version: int,
    committed: tuple[PartitionStore, int],
    init_store: PartitionStore | None,
    new_rows: NewRowSource | None = None,
) -> Source:
    """Where ``key``'s state is, for the open version (see :mod:`pbg_core.session.residency`).

    Raises:
        PbgError: a save of this pass or a committed partition is missing.
    """
    entity, part = key
    if key in locations:
        # Saved earlier in this pass: that save and nothing else is its state.
        where = locations[key]
        label = f"version {open_version}" + ("" if where == FINAL else f" (saved after bucket {where})")
        if not target(where).has_embeddings(entity, part, open_version):
            raise PbgError(
                f"{label} should hold embeddings of entity type {entity!r} partition {part}, but the file "
                "is missing; the progress area was changed from outside"
            )
        return Source(label, target(where), open_version)
    store, version = committed
    if version > 0:
        # A committed version already holds what init_path gave it, and must hold every partition.
        if store.has_embeddings(entity, part, version):
            return Source(f"version {version}", store, version)
        raise PbgError(
            f"checkpoint version {version} has no embeddings for entity type "
            f"{entity!r} partition {part}; the checkpoint is incomplete or from another config"
        )
    if init_store is not None:
        init_version = init_store.read_version()
        if init_store.has_embeddings(entity, part, init_version):
            return Source(f"init_path version {init_version}", init_store, init_version, grows=True, new_rows=new_rows)
    return Source("random")  # nothing committed and no init_path file: a seeded random start


def fill(handle: SlotHandle, source: Source, seed: int, init_scale: float) -> int:
    """Read ``source`` into ``handle`` (or initialise it at random); returns the bytes read.

    Raises:
        ShapeError: the stored partition does not fit (more rows, or fewer where ``source`` may not grow).
    """
    if source.store is None:
        _random(handle, seed, init_scale)
        return 0
    rows = handle.count
    if source.grows:
        stored_rows, _ = source.store.embeddings_shape(handle.entity, handle.partition, source.version)
        if stored_rows > handle.count:
            raise ShapeError(
                f"{source.label} has {stored_rows} rows of entity type {handle.entity!r} partition "
                f"{handle.partition}, more than the {handle.count} the entity files list now; "
                "was the import replaced instead of appended to?"
            )
        if stored_rows < handle.count:
            _random(handle, seed, init_scale)  # the new rows: as a fresh model's (the old are overwritten)
            rows = stored_rows
    embeddings, state = handle.embeddings[:rows], handle.state[:rows]
    _, optim = source.store.load_embeddings(handle.entity, handle.partition, source.version, out=embeddings)
    if optim is None or not RowAdagrad.load_state_dict(state_from_bytes(optim), state):
        state.zero_()
    if source.grows:  # rows init_path did not train: appended ones past its rows, or new by name among them
        _new_rows(handle, source.new_rows)
    return embeddings.numel() * 4


def _new_rows(handle: SlotHandle, new_rows: NewRowSource | None) -> None:
    """Overwrite the prepared new rows (neighbor means, and their Adagrad sums) of the random start."""
    loaded = None if new_rows is None else new_rows.load_new_rows(handle.entity, handle.partition)
    if loaded is not None:
        offsets, vectors, sums = loaded
        handle.embeddings[offsets] = vectors
        if sums is not None:
            handle.state[offsets] = sums


def _random(handle: SlotHandle, seed: int, init_scale: float) -> None:
    random_start(handle.embeddings, seed, handle.entity, handle.partition, init_scale)
    handle.state.zero_()


def random_start(embeddings: torch.Tensor, seed: int, entity: str, part: int, init_scale: float) -> None:
    """Fill ``embeddings`` (a whole partition) with a fresh model's seeded start, in place."""
    embeddings.normal_(generator=torch_generator(seed, "init", entity, part)).mul_(init_scale)


def write(
    handle: SlotHandle, store: PartitionStore, version: int, embedding_lr: float, metadata: CheckpointMetadata
) -> int:
    """Write ``handle``'s embeddings and row state as ``version`` in ``store``; returns the bytes."""
    state = state_to_bytes(RowAdagrad.state_dict(handle.state, embedding_lr))
    store.save_embeddings(handle.entity, handle.partition, version, handle.embeddings, state, metadata)
    return slot_bytes(handle)


def slot_bytes(handle: SlotHandle) -> int:
    """What saving ``handle``'s partition writes: float32 embeddings and row state."""
    return handle.embeddings.numel() * 4 + handle.state.numel() * 4
