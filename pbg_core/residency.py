"""Which partitions are in memory, where they come from, and when they are saved.

:class:`PartitionResidency` is the single owner of the mapping
(entity type, partition) -> shared-memory slot for a training run, and of the
"dirty" and "saved in this pass" sets. It implements PBG's swap rule: moving to
a bucket saves the partitions no longer needed (if trained since loaded) and
loads the ones that are needed.

Where a partition is read from, for the open version ``v + 1``:
1. ``v + 1`` if it was already saved during this pass (evicted earlier);
2. the committed version ``v``;
3. ``init_path`` (its own committed version, or v0 names);
4. random normal initialisation scaled by ``init_scale`` (seeded).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any
from dataclasses import dataclass, field

import torch

from pbg_core.errors import PbgError
from pbg_core.memory import EmbeddingPool, SlotHandle
from pbg_core.optimizers import RowAdagrad, state_from_bytes, state_to_bytes
from pbg_core.ports import PartitionStore
from pbg_core.seeding import torch_generator
from pbg_core.types import EntityName, Partition

logger = logging.getLogger(__name__)

PartitionKey = tuple[EntityName, Partition]


@dataclass
class IoCounter:
    """Bytes and seconds spent moving partitions, reset per bucket."""

    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0

    def reset(self) -> None:
        """Start counting a new bucket."""
        self.bytes_read = self.bytes_written = 0
        self.seconds = 0.0

    def as_dict(self) -> dict[str, float]:
        """JSON form for stats rows."""
        return {"bytes_read": self.bytes_read, "bytes_written": self.bytes_written, "seconds": self.seconds}


@dataclass
class PartitionResidency:
    """Owns resident partitions: load, save, evict, and the dirty bookkeeping.

    Attributes:
        pool: Shared-memory slots (acquired and released only here).
        store: The run's checkpoint directory.
        init_store: ``init_path`` checkpoint, if any.
        counts: Entity count per (entity, partition).
        init_scale: Std of the random initialisation.
        seed: Run seed (random init of (entity, part) is seeded by it).
        committed_version: Last committed version ``v``; writes go to ``v + 1``.
        metadata: Returns the attributes to write on checkpoint files.
    """

    pool: EmbeddingPool
    store: PartitionStore
    init_store: PartitionStore | None
    counts: dict[PartitionKey, int]
    init_scale: float
    seed: int
    committed_version: int
    metadata: Any  # a session_parts.MetadataSource: called for each file's attributes
    resident: dict[PartitionKey, SlotHandle] = field(default_factory=dict)
    dirty: set[PartitionKey] = field(default_factory=set)
    saved_this_pass: set[PartitionKey] = field(default_factory=set)
    io: IoCounter = field(default_factory=IoCounter)

    @property
    def open_version(self) -> int:
        """The version being written."""
        return self.committed_version + 1

    def handle(self, key: PartitionKey) -> SlotHandle:
        """The slot holding a resident partition."""
        return self.resident[key]

    def ensure_resident(self, keys: Iterable[PartitionKey]) -> None:
        """Load every key not yet in memory."""
        for key in keys:
            if key not in self.resident:
                self._load(key)

    def evict_except(self, keep: set[PartitionKey], evictable: Iterable[PartitionKey]) -> None:
        """Save (if dirty) and release every resident evictable partition not in ``keep``."""
        for key in [k for k in evictable if k in self.resident and k not in keep]:
            self.save(key)
            self.pool.release(self.resident.pop(key))

    def mark_dirty(self, keys: Iterable[PartitionKey]) -> None:
        """Record that these partitions were trained since they were loaded."""
        self.dirty.update(keys)

    def save(self, key: PartitionKey) -> None:
        """Write a dirty resident partition as the open version."""
        if key not in self.dirty:
            return
        handle = self.resident[key]
        started = time.perf_counter()
        self.store.save_embeddings(
            key[0], key[1], self.open_version, handle.embeddings, state_to_bytes(RowAdagrad.state_dict(handle.state)), self.metadata()
        )
        self.io.seconds += time.perf_counter() - started
        self.io.bytes_written += handle.embeddings.numel() * 4 + handle.state.numel() * 4
        self.dirty.discard(key)
        self.saved_this_pass.add(key)

    def complete_open_version(self, all_keys: Iterable[PartitionKey]) -> None:
        """Make version ``v + 1`` hold every partition: save dirty ones, carry over untouched ones."""
        for key in all_keys:
            if key in self.resident:
                if key in self.dirty:
                    self.save(key)
                elif key not in self.saved_this_pass:
                    self._write_resident(key)
            elif key not in self.saved_this_pass:
                self._load(key)
                self._write_resident(key)
                self.pool.release(self.resident.pop(key))

    def commit(self, version: int) -> None:
        """The pointer now says ``version``: resident data equals it, nothing is dirty."""
        self.committed_version = version
        self.saved_this_pass.clear()
        self.dirty.clear()

    def release_all(self) -> None:
        """Return every slot to the pool (end of run)."""
        for handle in self.resident.values():
            self.pool.release(handle)
        self.resident.clear()

    def _write_resident(self, key: PartitionKey) -> None:
        self.dirty.add(key)
        self.save(key)

    def _load(self, key: PartitionKey) -> None:
        entity, part = key
        handle = self.pool.acquire(entity, part, self.counts[key])
        self.resident[key] = handle
        started = time.perf_counter()
        source = self._read_into(key, handle)
        self.io.seconds += time.perf_counter() - started
        if source != "random":
            self.io.bytes_read += handle.embeddings.numel() * 4
        logger.debug("loaded %s partition %d from %s", entity, part, source)

    def _read_into(self, key: PartitionKey, handle: SlotHandle) -> str:
        entity, part = key
        candidates: list[tuple[PartitionStore, int, str]] = []
        if key in self.saved_this_pass:
            candidates.append((self.store, self.open_version, f"version {self.open_version}"))
        if self.committed_version > 0:
            candidates.append((self.store, self.committed_version, f"version {self.committed_version}"))
        if self.init_store is not None:
            init_version = self.init_store.read_version()
            candidates.append((self.init_store, init_version, f"init_path version {init_version}"))
        for store, version, label in candidates:
            if store.has_embeddings(entity, part, version):
                _, optim = store.load_embeddings(entity, part, version, out=handle.embeddings)
                if optim is None or not RowAdagrad.load_state_dict(state_from_bytes(optim), handle.state):
                    handle.state.zero_()
                return label
        if self.committed_version > 0:
            # A committed version must hold every partition; never paper over a loss.
            raise PbgError(
                f"checkpoint version {self.committed_version} has no embeddings for entity type "
                f"{entity!r} partition {part}; the checkpoint is incomplete or from another config"
            )
        generator = torch_generator(self.seed, "init", entity, part)
        handle.embeddings.normal_(generator=generator).mul_(self.init_scale)
        handle.state.zero_()
        return "random"
