"""Preallocated shared-memory embedding slots: the single owner of entity embedding buffers.

Each entity type gets one buffer of ``num_slots x max_count x dim`` float32
embeddings and one of ``num_slots x max_count`` float32 row-Adagrad state,
allocated once, directly in shared memory, for the whole run. A partition
loaded into memory occupies one *slot*: the first ``count`` rows of one
``[max_count, dim]`` plane. Allocating once (like PBG's free-list of
``allocate_shared_tensor`` buffers) avoids re-sharing tensors with the worker
processes on every swap: workers receive :meth:`EmbeddingPool.buffers` once at
start, and each job names slots by index (:meth:`PoolBuffers.views`).

Invariants (checked, with errors naming the values): a given (entity, partition)
is held by at most one slot; only held slots are released; ``count <= max_count``.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from pbg_core.errors import PbgError, ShapeError, SharedMemoryFull, UnknownNameError
from pbg_core.types import EntityName, FloatTensorType, Partition, PartitionKey, Side, SideKey

SlotRef = tuple[int, int]  # (slot index, row count)
SlotMap = Mapping[SideKey, SlotRef]


class SlotError(PbgError, RuntimeError):
    """An acquire/release broke a slot invariant (double acquire, no free slot, double release)."""


@dataclass(frozen=True)
class SlotSpec:
    """Shape of one entity type's buffers.

    Attributes:
        max_count: Rows per slot: the largest partition count of the type.
        dim: Embedding dimension of the type.
        num_slots: Partitions of the type that can be resident at once.
    """

    max_count: int
    dim: int
    num_slots: int


@dataclass(frozen=True, eq=False)
class SlotHandle:
    """A partition resident in a slot: views of the first ``count`` rows of that slot.

    Attributes:
        entity: Entity type.
        partition: Partition held.
        slot: Slot index within the entity type's buffer.
        count: Number of entities of the partition (rows used).
        embeddings: ``[count, dim]`` view into shared memory.
        state: ``[count]`` row-Adagrad state view into shared memory.
    """

    entity: EntityName
    partition: Partition
    slot: int
    count: int
    embeddings: FloatTensorType
    state: FloatTensorType

    @property
    def ref(self) -> SlotRef:
        """``(slot, count)``: how jobs name this partition to the workers."""
        return (self.slot, self.count)


@dataclass(frozen=True)
class PoolBuffers:
    """The picklable description of every buffer, sent to each worker once at start.

    Pickled through ``torch.multiprocessing`` the tensors arrive as the same shared
    memory, not copies.

    Attributes:
        embeddings: Entity type -> ``[num_slots, max_count, dim]`` float32.
        state: Entity type -> ``[num_slots, max_count]`` float32.
    """

    embeddings: dict[EntityName, torch.Tensor]
    state: dict[EntityName, torch.Tensor]

    def views(self, slot_map: SlotMap) -> tuple[dict[SideKey, torch.Tensor], dict[SideKey, torch.Tensor]]:
        """Rebuild a job's tables from ``{(entity, side): (slot, count)}``.

        Both sides naming the same slot (a diagonal bucket, or an unpartitioned type)
        get the *same* tensor objects, so the optimizer sees one table.

        Args:
            slot_map: Where each (entity type, side) of the bucket lives.

        Returns:
            ``(embeddings, state)`` dicts keyed like ``slot_map``: ``[count, dim]`` and
            ``[count]`` views into the shared buffers.

        Raises:
            UnknownNameError: an entity type with no buffer.
            ShapeError: a slot index or count outside the buffer.
        """
        embeddings: dict[SideKey, torch.Tensor] = {}
        state: dict[SideKey, torch.Tensor] = {}
        made: dict[tuple[EntityName, int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        for (entity, side), (slot, count) in slot_map.items():
            key = (entity, slot, count)
            if key not in made:
                made[key] = self._slice(entity, slot, count)
            embeddings[entity, side], state[entity, side] = made[key]
        return embeddings, state

    def _slice(self, entity: EntityName, slot: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        if entity not in self.embeddings:
            raise UnknownNameError(
                f"no embedding buffer for entity type {entity!r}; known: {', '.join(sorted(self.embeddings))}"
            )
        num_slots, max_count, _ = self.embeddings[entity].shape
        if not 0 <= slot < num_slots:
            raise ShapeError(f"slot {slot} of entity type {entity!r} is not in [0, {num_slots})")
        if not 0 <= count <= max_count:
            raise ShapeError(f"count {count} of entity type {entity!r} is not in [0, {max_count}]")
        return self.embeddings[entity][slot, :count], self.state[entity][slot, :count]


def shared_empty(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised tensor allocated directly in shared memory.

    ``torch.empty(...).share_memory_()`` would allocate private memory and then copy it
    into a shared segment (twice the peak memory); this allocates the segment once.

    Raises:
        SharedMemoryFull: naming the size when the shared-memory allocation fails (a full
            ``/dev/shm`` is the usual cause in containers).
    """
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    try:
        storage: torch.UntypedStorage = torch.UntypedStorage._new_shared(nbytes)
    except RuntimeError as exc:
        raise SharedMemoryFull(
            f"could not allocate {nbytes / 1e9:.2f} GB of shared memory for a tensor of shape {shape}: {exc}; "
            "check free space in /dev/shm (docker: --shm-size)"
        ) from exc
    tensor: torch.Tensor = torch.empty(0, dtype=dtype).set_(storage, 0, shape)  # type: ignore[call-overload]  # torch's stubs have no (UntypedStorage, offset, size) overload; torch accepts it
    return tensor


@dataclass
class EmbeddingPool:
    """Slots of shared-memory embedding buffers, acquired and released per partition.

    Build it with :meth:`allocate`.

    Attributes:
        specs: Buffer shape per entity type.
        shared: The buffers themselves (what workers receive).
    """

    specs: dict[EntityName, SlotSpec]
    shared: PoolBuffers
    _free: dict[EntityName, list[int]] = field(default_factory=dict)
    _held: dict[PartitionKey, SlotHandle] = field(default_factory=dict)

    @classmethod
    def allocate(cls, specs: Mapping[EntityName, SlotSpec]) -> EmbeddingPool:
        """Allocate every buffer in shared memory (uninitialised).

        Args:
            specs: Entity type -> rows per slot, dimension and number of slots.

        Raises:
            ShapeError: a spec with ``max_count < 0``, ``dim < 1`` or ``num_slots < 1``.
        """
        for entity, spec in specs.items():
            if spec.max_count < 0 or spec.dim < 1 or spec.num_slots < 1:
                raise ShapeError(
                    f"bad slot spec for entity type {entity!r}: {spec}; need max_count >= 0, dim >= 1, num_slots >= 1"
                )
        shared = PoolBuffers(
            embeddings={e: shared_empty((s.num_slots, s.max_count, s.dim)) for e, s in specs.items()},
            state={e: shared_empty((s.num_slots, s.max_count)) for e, s in specs.items()},
        )
        free = {e: list(range(s.num_slots)) for e, s in specs.items()}
        return cls(specs=dict(specs), shared=shared, _free=free)

    def buffers(self) -> PoolBuffers:
        """The picklable buffer description to send to each worker once."""
        return self.shared

    def acquire(self, entity: EntityName, partition: Partition, count: int) -> SlotHandle:
        """Take a free slot of ``entity`` for ``partition`` with ``count`` rows.

        The slot's contents are whatever was there before: the caller loads or initialises it.

        Raises:
            UnknownNameError: ``entity`` has no buffer.
            ShapeError: ``count`` is negative or above the type's ``max_count``.
            SlotError: ``(entity, partition)`` is already held, or every slot is taken.
        """
        spec = self._spec(entity)
        if not 0 <= count <= spec.max_count:
            raise ShapeError(
                f"cannot hold {count} rows of entity type {entity!r} partition {partition}: "
                f"the count must be in [0, max_count={spec.max_count}]"
            )
        held = self._held.get((entity, partition))
        if held is not None:
            raise SlotError(
                f"entity type {entity!r} partition {partition} is already held in slot {held.slot}; "
                "release it before acquiring it again"
            )
        if not self._free[entity]:
            holders = sorted(p for (e, p) in self._held if e == entity)
            raise SlotError(
                f"no free slot for entity type {entity!r} partition {partition}: all "
                f"{spec.num_slots} slots hold partitions {holders}; release one first"
            )
        slot = self._free[entity].pop(0)
        embeddings, state = self.shared.views({(entity, Side.LHS): (slot, count)})
        handle = SlotHandle(entity, partition, slot, count, embeddings[entity, Side.LHS], state[entity, Side.LHS])
        self._held[entity, partition] = handle
        return handle

    def release(self, handle: SlotHandle) -> None:
        """Return ``handle``'s slot to the free list.

        Raises:
            SlotError: the handle is not the current holder of its (entity, partition)
                (already released, or from another pool).
        """
        current = self._held.get((handle.entity, handle.partition))
        if current is not handle:
            raise SlotError(
                f"cannot release slot {handle.slot} of entity type {handle.entity!r} "
                f"(partition {handle.partition}): it is not held by this handle (already released?)"
            )
        del self._held[handle.entity, handle.partition]
        self._free[handle.entity].append(handle.slot)
        self._free[handle.entity].sort()

    def lookup(self, entity: EntityName, partition: Partition) -> SlotHandle | None:
        """The handle currently holding ``(entity, partition)``, or None."""
        return self._held.get((entity, partition))

    def held(self) -> list[PartitionKey]:
        """Every (entity, partition) currently in a slot, sorted."""
        return sorted(self._held)

    def free_slots(self, entity: EntityName) -> int:
        """How many slots of ``entity`` are free."""
        self._spec(entity)
        return len(self._free[entity])

    def _spec(self, entity: EntityName) -> SlotSpec:
        try:
            return self.specs[entity]
        except KeyError:
            raise UnknownNameError(
                f"no embedding buffer for entity type {entity!r}; known: {', '.join(sorted(self.specs))}"
            ) from None


def release_free_memory() -> None:
    """Give freed heap memory back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    Edge chunks and index permutations are tens of MiB each; glibc keeps freed
    blocks of that size in the heap, which would count against the process's
    RSS for the rest of the run.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass
