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
from functools import partial
from typing import Any

from pbg_core.parallel.memory import EmbeddingPool, SlotHandle
from pbg_core.ports import FINAL, NewRowSource, PartitionStore, ProgressStore
from pbg_core.session.partition_io import IoJob, PartitionIo
from pbg_core.session.partition_reads import Source, fill, slot_bytes, source_of, write
from pbg_core.session.schedule import choose_evictions
from pbg_core.types import EntityName, PartitionKey

logger = logging.getLogger(__name__)


@dataclass
class IoCounter:
    """Bytes and seconds spent moving partitions, reset per bucket."""

    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0  # the swap: the training thread waiting for partition I/O, or doing it
    background_seconds: float = 0.0  # partition I/O done on the I/O thread meanwhile

    def reset(self) -> None:
        """Start counting a new bucket."""
        self.bytes_read = self.bytes_written = 0
        self.seconds = self.background_seconds = 0.0

    def as_dict(self) -> dict[str, float]:
        """JSON form for stats rows."""
        return {
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "seconds": self.seconds,
            "background_seconds": self.background_seconds,
        }


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
        io_thread: Where partitions are read ahead (:meth:`prefetch`) and written behind
            (evictions) while a bucket trains; a partition with a job in flight is neither
            resident nor free until the job is collected (:meth:`collect`).
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
    io_thread: PartitionIo | None = None  # background loads and saves (None: every move waits)
    new_rows: NewRowSource | None = None  # neighbor-mean starts of rows init_store lacks

    @property
    def open_version(self) -> int:
        """The version being written."""
        return self.committed_version + 1

    def handle(self, key: PartitionKey) -> SlotHandle:
        """The slot holding a resident partition."""
        return self.resident[key]

    def ensure_resident(self, keys: Iterable[PartitionKey]) -> None:
        """Make every key resident (read ahead: wait for it; else load it now); all of ``keys``
        become the most recently used."""
        started = time.perf_counter()
        self.collect()
        for key in keys:
            if key in self.resident:
                self.resident[key] = self.resident.pop(key)  # dict order is least recently used first
                continue
            pending = self.io_thread.pending.get(key) if self.io_thread is not None else None
            if pending is not None:
                self._collect(self.io_thread.wait(key))  # type: ignore[union-attr]  # pending implies a thread
            if key not in self.resident:  # not read ahead (or only being written): read it now
                self._load(key)
        self.io.seconds += time.perf_counter() - started

    def prefetch(self, keys: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Start reading ``keys`` into free slots on the I/O thread (those with room); returns them."""
        if self.io_thread is None:
            return []
        self.collect()
        started = []
        for key in keys:
            if key in self.resident or key in self.io_thread.pending or not self.pool.free_slots(key[0]):
                continue
            handle = self.pool.acquire(key[0], key[1], self.counts[key])
            source = self._source(key)
            self.io_thread.submit(
                key, "load", handle, source.label, partial(fill, handle, source, self.seed, self.init_scale)
            )
            started.append(key)
        return started

    def make_room(
        self, wanted: Iterable[PartitionKey], capacity: Mapping[EntityName, int], later_uses: Mapping[PartitionKey, int]
    ) -> list[PartitionKey]:
        """Save (if dirty) and release the partitions that must leave so that ``wanted`` fits.

        ``capacity`` is how many partitions of each partitioned type stay in memory; which
        leave is :func:`~pbg_core.session.schedule.choose_evictions`'s choice (the fewest
        ``later_uses`` first, then the least recently used). With an I/O thread a dirty one
        is written behind (its slot is freed when the write is collected). Returns the keys.
        """
        started = time.perf_counter()
        self.collect()
        held = [key for key in self.resident if key[0] in capacity]
        evicted = choose_evictions(held, wanted, capacity, later_uses)
        for key in evicted:
            if key in self.dirty and self.io_thread is not None:
                self._save_behind(key)
            else:
                self.save(key)
                self.pool.release(self.resident.pop(key))
        self.io.seconds += time.perf_counter() - started
        return evicted

    def collect(self) -> None:
        """Apply the outcome of every finished background job (raises a failed job's error)."""
        if self.io_thread is not None:
            for job in self.io_thread.finished():
                self._collect(job)

    def settle(self) -> None:
        """Wait for every background job and apply it (before saves, commits and restores)."""
        # Timed by the step that settles (a save point's or the checkpoint's own timing), not as swap I/O.
        if self.io_thread is not None:
            for key in list(self.io_thread.pending):
                self._collect(self.io_thread.wait(key))

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
        # Not timed here: a swap times all its I/O (make_room), a save point and the checkpoint theirs.
        self.io.bytes_written += write(
            handle, self._target(where), self.open_version, self.embedding_lr, self.metadata()
        )
        self.dirty.discard(key)
        self.locations[key] = where
        return True

    def dirty_bytes(self) -> int:
        """Bytes a save of every dirty resident partition would write (embeddings and state)."""
        return sum(slot_bytes(self.resident[key]) for key in self.dirty if key in self.resident)

    def promoted_keys(self) -> list[PartitionKey]:
        """Partitions :meth:`complete_open_version` names by promoting a progress-area save, not by writing.

        (A hard link on local disk: they take no new room.)
        """
        if self.progress is None:
            return []
        return sorted(
            key
            for key, where in self.locations.items()
            if where != FINAL and not (key in self.resident and key in self.dirty)
        )

    def written_at_completion(self, all_keys: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Partitions :meth:`complete_open_version` writes: the dirty resident ones, and those no save
        of this pass holds (the others are under the version's names already, or promoted)."""
        return [key for key in all_keys if (key in self.resident and key in self.dirty) or key not in self.locations]

    def save_dirty(self, position: int) -> list[PartitionKey]:
        """Save every dirty resident partition into ``position``'s area; returns the keys saved."""
        self.settle()  # partitions written behind must be on disk before a record names them
        return [key for key in sorted(self.resident) if self.save(key, position)]

    def restore(self, locations: dict[PartitionKey, int]) -> bool:
        """Start a pass from the saves of an interrupted one (``{}``: from the committed version).

        Resident partitions are reloaded when their source changes: those in
        ``locations``, and all of them if memory was changed since the last commit
        (a pass abandoned in this process). Returns whether memory had changed.
        """
        self.settle()
        changed = bool(self.locations or self.dirty)
        self.locations = dict(locations)
        self.dirty.clear()
        for key in sorted(self.resident):
            if changed or key in self.locations:
                source = self._source(key)
                fill(self.resident[key], source, self.seed, self.init_scale)
                logger.debug("reloaded %s partition %d from %s", key[0], key[1], source.label)
        return changed

    def complete_open_version(self, all_keys: Iterable[PartitionKey]) -> None:
        """Make version ``v + 1``'s own files hold every partition.

        Dirty resident partitions are written; saves in progress areas are copied;
        partitions untouched in this pass are carried over from where they come from.
        """
        self.settle()
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
        self.settle()
        self.committed_version = version
        self.locations.clear()
        self.dirty.clear()

    def release_all(self) -> None:
        """Stop the I/O thread (after its jobs in flight) and return every slot to the pool (end of run).

        What a job in flight wrote is not recorded anywhere: a later run reads what the last
        record names, so its outcome is not waited for beyond the thread's end.
        """
        if self.io_thread is not None:
            thread, self.io_thread = self.io_thread, None
            thread.close()
            for job in thread.finished():
                if job.future.exception() is not None:
                    logger.warning("partition %s %s failed at shutdown: %s", job.key, job.kind, job.future.exception())
                self.pool.release(job.handle)
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
        """Read ``key`` into a free slot now (waiting for a write behind to free one if needed)."""
        self._free_a_slot(key[0])
        handle = self.pool.acquire(key[0], key[1], self.counts[key])
        self.resident[key] = handle
        source = self._source(key)
        self.io.bytes_read += fill(handle, source, self.seed, self.init_scale)
        logger.debug("loaded %s partition %d from %s", key[0], key[1], source.label)

    def _source(self, key: PartitionKey) -> Source:
        committed = (self.store, self.committed_version)
        return source_of(
            key, self.locations, self._target, self.open_version, committed, self.init_store, self.new_rows
        )

    def _save_behind(self, key: PartitionKey) -> None:
        """Hand a dirty partition leaving memory to the I/O thread (it is no longer resident)."""
        assert self.io_thread is not None
        handle, where = self.resident.pop(key), self.save_position
        job = partial(write, handle, self._target(where), self.open_version, self.embedding_lr, self.metadata())
        self.io_thread.submit(key, "save", handle, where, job)
        self.dirty.discard(key)

    def _free_a_slot(self, entity: EntityName) -> None:
        """Wait for the oldest write behind of ``entity`` when every slot of it is taken."""
        while self.io_thread is not None and not self.pool.free_slots(entity):
            key = self.io_thread.oldest("save", entity)
            if key is None:
                return  # nothing to wait for: acquire will say what holds the slots
            self._collect(self.io_thread.wait(key))

    def _collect(self, job: IoJob) -> None:
        """Apply a finished job on this thread: a read becomes resident, a write frees its slot."""
        try:
            moved, seconds = job.future.result()
        except BaseException:
            if job.kind == "save":  # still in memory: resident and dirty again, so a retry saves it
                self.resident[job.key] = job.handle
                self.dirty.add(job.key)
            else:
                self.pool.release(job.handle)
            raise
        self.io.background_seconds += seconds
        if job.kind == "load":
            self.resident[job.key] = job.handle
            self.io.bytes_read += moved
        else:
            self.locations[job.key] = int(job.target)  # type: ignore[call-overload]  # a save's target is its position
            self.io.bytes_written += moved
            self.pool.release(job.handle)
