"""Partition reads and writes off the training thread: one background thread, jobs in submission order.

While a bucket trains, the partition the next bucket needs is read into a spare slot and the
partitions that left memory are written from their slots, so the next swap finds its
partitions in memory instead of waiting for the disk (PBG removed its background I/O; with
partitions of gigabytes, each read or write is seconds). The jobs touch nothing but the slot
and the store they are given: :class:`~pbg_core.session.residency.PartitionResidency` decides
what to read or write and applies each job's outcome on the training thread when it collects
it, so the residency state keeps one owner. One thread, in order: a partition written and then
read again is read after the write, and the disk sees one stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from pbg_core.parallel.memory import SlotHandle
from pbg_core.types import PartitionKey

Job = Callable[[], int]  # does the I/O; returns the bytes moved


@dataclass(frozen=True)
class IoJob:
    """A submitted read ("load") or write ("save") of one partition's slot.

    Attributes:
        key: The partition.
        kind: ``"load"`` or ``"save"``.
        handle: The slot read into or written from (held until the job is collected).
        target: Where it is read from or written to (a label, or the progress position of a save).
        future: Resolves to (bytes moved, seconds taken) or raises the job's error.
    """

    key: PartitionKey
    kind: str
    handle: SlotHandle
    target: object
    future: Future[tuple[int, float]]


class PartitionIo:
    """One thread ("pbg-partition-io") running partition loads and saves in order."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pbg-partition-io")
        self.pending: dict[PartitionKey, IoJob] = {}  # at most one job per partition

    def submit(self, key: PartitionKey, kind: str, handle: SlotHandle, target: object, job: Job) -> None:
        """Queue ``job`` for ``key`` (a key with a job in flight is refused: collect it first)."""
        if key in self.pending:
            raise RuntimeError(f"partition {key} already has a {self.pending[key].kind} in flight")
        self.pending[key] = IoJob(key, kind, handle, target, self._executor.submit(_timed, job))

    def finished(self) -> list[IoJob]:
        """Jobs done (or failed) by now, removed from :attr:`pending`, in submission order."""
        return [self.pending.pop(key) for key in list(self.pending) if self.pending[key].future.done()]

    def wait(self, key: PartitionKey) -> IoJob:
        """Block until ``key``'s job is done; it is removed from :attr:`pending`."""
        job = self.pending.pop(key)
        job.future.exception()  # waits; the error, if any, is raised by the collector
        return job

    def oldest(self, kind: str, entity: str) -> PartitionKey | None:
        """The earliest pending job of ``kind`` for ``entity``'s partitions, or None."""
        return next((key for key, job in self.pending.items() if job.kind == kind and key[0] == entity), None)

    def close(self) -> None:
        """Wait for the jobs in flight and stop the thread."""
        self._executor.shutdown(wait=True)


def _timed(job: Job) -> tuple[int, float]:
    started = time.perf_counter()
    moved = job()
    return moved, time.perf_counter() - started
