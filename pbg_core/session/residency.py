"""Which partitions are in memory, where they come from, and when they are saved.

:class:`PartitionResidency` is the single owner of the mapping
(entity type, partition) -> shared-memory slot for a training run, and of the
"dirty" and "saved in this pass" sets. It implements the swap rule: moving to a
bucket loads the partitions it needs; when a type's slots are full, those that must leave
(the fewest later uses first, see :mod:`pbg_core.session.schedule`) are saved if trained
since loaded, and released. With room for one bucket only this is PBG's rule, except that a
bucket needing one partition of a two-slot type keeps the other (a later bucket may use it).

Saves of the open version ``v + 1`` go to the progress area of the bucket that made
the partition dirty (see :mod:`storage.progress`), or to ``v + 1``'s own names for the
last bucket of a pass and at the end of a pass; :attr:`PartitionResidency.locations`
remembers where each partition's latest state of this pass is.

Where a partition is read from, for the open version ``v + 1``:
1. its latest save of this pass (:attr:`PartitionResidency.locations`);
2. the committed version ``v`` (which must hold it when ``v > 0``: an error otherwise);
3. when nothing is committed (``v == 0``), ``init_path`` (its own committed version, or v0 names);
4. random normal initialisation scaled by ``init_scale`` (seeded).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pbg_core.errors import PbgError
from pbg_core.parallel.memory import EmbeddingPool, SlotHandle
from pbg_core.ports import FINAL, PartitionStore, ProgressStore
from pbg_core.seeding import torch_generator
from pbg_core.session.schedule import choose_evictions
from pbg_core.training.optimizers import RowAdagrad, state_from_bytes, state_to_bytes
from pbg_core.types import EntityName, PartitionKey

logger = logging.getLogger(__name__)


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
        progress: The checkpoint's progress area (None: every save goes to ``v + 1``'s names).
        locations: (entity, part) -> where its latest save of this pass is (a bucket
            position's progress area, or FINAL).
        save_position: The progress area the next save goes to (the bucket that made
            the partitions dirty).
    """

    pool: EmbeddingPool
    store: PartitionStore
    init_store: PartitionStore | None
    counts: dict[PartitionKey, int]
    init_scale: float
    seed: int
    committed_version: int
    metadata: Any  # a session_parts.MetadataSource: called for each file's attributes
    progress: ProgressStore | None = None
    embedding_lr: float = 0.0  # written into the optimizer state (PBG's trainer resumes with it)
    resident: dict[PartitionKey, SlotHandle] = field(default_factory=dict)
    dirty: set[PartitionKey] = field(default_factory=set)
    locations: dict[PartitionKey, int] = field(default_factory=dict)
    save_position: int = FINAL
    io: IoCounter = field(default_factory=IoCounter)

    @property
    def open_version(self) -> int:
        """The version being written."""
        return self.committed_version + 1

    def handle(self, key: PartitionKey) -> SlotHandle:
        """The slot holding a resident partition."""
        return self.resident[key]

    def ensure_resident(self, keys: Iterable[PartitionKey]) -> None:
        """Load every key not yet in memory; all of ``keys`` become the most recently used."""
        for key in keys:
            if key in self.resident:
                self.resident[key] = self.resident.pop(key)  # dict order is least recently used first
            else:
                self._load(key)

    def make_room(
        self, wanted: Iterable[PartitionKey], capacity: Mapping[EntityName, int], later_uses: Mapping[PartitionKey, int]
    ) -> list[PartitionKey]:
        """Save (if dirty) and release the partitions that must leave so that ``wanted`` fits.

        ``capacity`` is how many partitions of each partitioned type stay in memory; which
        leave is :func:`~pbg_core.session.schedule.choose_evictions`'s choice (the fewest
        ``later_uses`` first, then the least recently used). Returns the evicted keys.
        """
        held = [key for key in self.resident if key[0] in capacity]
        evicted = choose_evictions(held, wanted, capacity, later_uses)
        for key in evicted:
            self.save(key)
            self.pool.release(self.resident.pop(key))
        return evicted

    def mark_dirty(self, keys: Iterable[PartitionKey], position: int = FINAL) -> None:
        """Record that these partitions were trained (by the bucket at ``position``) since saved."""
        self.dirty.update(keys)
        self.save_position = position

    def save(self, key: PartitionKey, position: int | None = None) -> bool:
        """Write a dirty resident partition of the open version; False if it was clean.

        Args:
            key: The partition.
            position: Progress area to save into (default :attr:`save_position`);
                FINAL writes the open version's own file.
        """
        if key not in self.dirty:
            return False
        where = self.save_position if position is None else position
        handle = self.resident[key]
        started = time.perf_counter()
        self._target(where).save_embeddings(
            key[0],
            key[1],
            self.open_version,
            handle.embeddings,
            state_to_bytes(RowAdagrad.state_dict(handle.state, self.embedding_lr)),
            self.metadata(),
        )
        self.io.seconds += time.perf_counter() - started
        self.io.bytes_written += _handle_bytes(handle)
        self.dirty.discard(key)
        self.locations[key] = where
        return True

    def dirty_bytes(self) -> int:
        """Bytes a save of every dirty resident partition would write (embeddings and state)."""
        return sum(_handle_bytes(self.resident[key]) for key in self.dirty if key in self.resident)

    def save_dirty(self, position: int) -> list[PartitionKey]:
        """Save every dirty resident partition into ``position``'s area; returns the keys saved."""
        return [key for key in sorted(self.resident) if self.save(key, position)]

    def restore(self, locations: dict[PartitionKey, int]) -> bool:
        """Start a pass from the saves of an interrupted one (``{}``: from the committed version).

        Resident partitions are reloaded when their source changes: those in
        ``locations``, and all of them if memory was changed since the last commit
        (a pass abandoned in this process). Returns whether memory had changed.
        """
        changed = bool(self.locations or self.dirty)
        self.locations = dict(locations)
        self.dirty.clear()
        for key in sorted(self.resident):
            if changed or key in self.locations:
                source = self._read_into(key, self.resident[key])
                logger.debug("reloaded %s partition %d from %s", key[0], key[1], source)
        return changed

    def complete_open_version(self, all_keys: Iterable[PartitionKey]) -> None:
        """Make version ``v + 1``'s own files hold every partition.

        Dirty resident partitions are written; saves in progress areas are copied;
        partitions untouched in this pass are carried over from where they come from.
        """
        for key in all_keys:
            if key in self.resident and key in self.dirty:
                self.save(key, FINAL)
            elif key in self.locations:
                if self.progress is not None and self.locations[key] != FINAL:
                    self.progress.promote(self.open_version, self.locations[key], key[0], key[1])
            elif key in self.resident:
                self._write_resident(key)
            else:
                self._load(key)
                self._write_resident(key)
                self.pool.release(self.resident.pop(key))

    def commit(self, version: int) -> None:
        """The pointer now says ``version``: resident data equals it, nothing is dirty."""
        self.committed_version = version
        self.locations.clear()
        self.dirty.clear()

    def release_all(self) -> None:
        """Return every slot to the pool (end of run)."""
        for handle in self.resident.values():
            self.pool.release(handle)
        self.resident.clear()

    def _write_resident(self, key: PartitionKey) -> None:
        self.dirty.add(key)
        self.save(key, FINAL)

    def _target(self, position: int) -> PartitionStore:
        """The store a save at ``position`` goes to."""
        if self.progress is None or position == FINAL:
            return self.store
        return self.progress.area(self.open_version, position)

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
        if key in self.locations:
            # Saved earlier in this pass: that save and nothing else is its state.
            where = self.locations[key]
            store = self._target(where)
            label = f"version {self.open_version}" + ("" if where == FINAL else f" (saved after bucket {where})")
            if not store.has_embeddings(entity, part, self.open_version):
                raise PbgError(
                    f"{label} should hold embeddings of entity type {entity!r} partition {part}, but the file "
                    "is missing; the progress area was changed from outside"
                )
            _load_from(store, self.open_version, key, handle)
            return label
        # A committed version already holds what init_path gave it: only a run that has committed
        # nothing reads init_path (which may then lack a partition: that one starts at random).
        candidates: list[tuple[PartitionStore, int, str]] = []
        if self.committed_version > 0:
            candidates.append((self.store, self.committed_version, f"version {self.committed_version}"))
        elif self.init_store is not None:
            init_version = self.init_store.read_version()
            candidates.append((self.init_store, init_version, f"init_path version {init_version}"))
        for store, version, label in candidates:
            if store.has_embeddings(entity, part, version):
                _load_from(store, version, key, handle)
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


def _handle_bytes(handle: SlotHandle) -> int:
    """What saving ``handle``'s partition writes: float32 embeddings and row state."""
    return handle.embeddings.numel() * 4 + handle.state.numel() * 4


def _load_from(store: PartitionStore, version: int, key: PartitionKey, handle: SlotHandle) -> None:
    """Read (entity, part) of ``version`` into ``handle``; Adagrad state zeroed if absent or unfit."""
    _, optim = store.load_embeddings(key[0], key[1], version, out=handle.embeddings)
    if optim is None or not RowAdagrad.load_state_dict(state_from_bytes(optim), handle.state):
        handle.state.zero_()
