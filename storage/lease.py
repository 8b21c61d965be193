"""A lease on a checkpoint directory: one training run writes it at a time.

``lease.json`` in the checkpoint directory names its holder (host, pid, run) and when
the lease expires. :meth:`CheckpointLease.acquire` creates it with an exclusive create
(``O_EXCL`` locally; a conditional ``If-None-Match: *`` PUT on S3), so of two runs
starting at once exactly one gets it; the other gets :class:`LeaseHeldError` naming the
holder. The holder renews the lease (:meth:`CheckpointLease.renew`, every third of the
time to live) and deletes it when done.

A holder that crashed cannot renew, so its lease expires after ``ttl`` seconds and the
next run takes it over. A holder on the same host whose process is gone is recognised
at once (pid plus the process's start time, so a reused pid is not mistaken for it),
so a run restarted after ``kill -9`` on the same machine does not wait for the expiry.
Taking over an expired lease deletes it (only if it is still the one read) and
creates a new one exclusively.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from storage.errors import BadDataError, DataNotFound, StorageError
from storage.fs import atomic, changes, reads, urls

logger = logging.getLogger(__name__)

LEASE_FILE = "lease.json"
DEFAULT_TTL = 60.0


class LeaseHeldError(StorageError):
    """Another live run holds the checkpoint's lease."""


class LeaseLostError(StorageError):
    """This run's lease expired and was taken over by another run: it must not commit."""


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease and until when (the content of ``lease.json``)."""

    token: str
    run: str
    host: str
    pid: int
    started: str  # the holder process's start time (/proc/<pid>/stat field 22), "" if unknown
    expires_at: float

    def describe(self) -> str:
        """``run 'x' (pid 12 on host h), lease valid until 2026-01-01 10:00:00 UTC``."""
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.expires_at))
        return f"run {self.run!r} (pid {self.pid} on host {self.host}), lease valid until {until}"

    def is_dead_here(self) -> bool:
        """Whether the holder ran on this host and its process is gone (or the pid was reused)."""
        if self.host != socket.gethostname() or not self.started:
            return False  # another machine, or no start time recorded: only the expiry tells
        return _process_start(self.pid) != self.started


class CheckpointLease:
    """The lease of one checkpoint directory, for one run.

    Args:
        checkpoint_url: The checkpoint directory.
        run: A label for this run (a Prefect flow run name or id), shown to others.
        ttl: Seconds the lease stays valid without renewal (env ``PBG_LEASE_TTL_SECONDS``).
        storage_options: Filesystem keyword arguments.
    """

    def __init__(self, checkpoint_url: str, run: str, ttl: float | None = None, storage_options: Any = None) -> None:
        self.url = urls.join_url(checkpoint_url, LEASE_FILE)
        self.run = run
        self.ttl = ttl if ttl is not None else float(os.environ.get("PBG_LEASE_TTL_SECONDS", DEFAULT_TTL))
        self.storage_options = storage_options
        self.token = uuid.uuid4().hex
        self.held = False

    def acquire(self) -> None:
        """Take the lease, or raise :class:`LeaseHeldError` naming the live holder."""
        for _ in range(3):
            if atomic.create_exclusive(self.url, self._content(), self.storage_options):
                self.held = True
                logger.info("lease on %s taken by run %r", self.url, self.run)
                return
            current = self.read()
            if current is None:
                continue  # released in between: try again
            if current.token == self.token:
                self.held = True
                return
            if current.expires_at > time.time() and not current.is_dead_here():
                raise LeaseHeldError(
                    self.url,
                    f"the checkpoint is being written by {current.describe()}; "
                    "wait for it, or delete this file if that run is known to be dead",
                )
            logger.warning(
                "taking over the lease on %s from %s (%s)",
                self.url,
                current.describe(),
                "expired" if current.expires_at <= time.time() else "its process is gone",
            )
            self._remove_if(current)
        raise LeaseHeldError(self.url, "another run keeps taking the lease; try again")

    def renew(self) -> None:
        """Extend the lease by ``ttl``; raises :class:`LeaseLostError` if another run took it over."""
        current = self.read()
        if current is None or current.token != self.token:
            self.held = False
            holder = current.describe() if current is not None else "nobody (the file was deleted)"
            raise LeaseLostError(self.url, f"this run's lease was taken over by {holder}; stop before committing")
        atomic.write_text_atomic(self.url, self._content(), self.storage_options)

    def release(self) -> None:
        """Delete the lease if this run still holds it (idempotent; retryable after a storage error)."""
        if not self.held:
            return
        current = self.read()
        if current is not None and current.token == self.token:
            changes.remove(self.url, missing_ok=True, storage_options=self.storage_options)
            logger.info("lease on %s released", self.url)
        self.held = False

    def read(self) -> LeaseHolder | None:
        """The current holder, or None when nobody holds the lease.

        Raises:
            BadDataError: ``lease.json`` exists but is not a lease.
        """
        try:
            text = reads.read_text(self.url, self.storage_options)
        except DataNotFound:
            return None
        try:
            return LeaseHolder(**json.loads(text))
        except (ValueError, TypeError) as exc:
            raise BadDataError(self.url, f"not a lease file ({exc}); delete it if no run is training") from None

    def _content(self) -> str:
        holder = LeaseHolder(
            token=self.token,
            run=self.run,
            host=socket.gethostname(),
            pid=os.getpid(),
            started=_process_start(os.getpid()),
            expires_at=time.time() + self.ttl,
        )
        return json.dumps(asdict(holder))

    def _remove_if(self, expected: LeaseHolder) -> None:
        """Delete the lease file if it still holds ``expected`` (narrows the takeover race)."""
        current = self.read()
        if current is not None and current.token == expected.token:
            changes.remove(self.url, missing_ok=True, storage_options=self.storage_options)


def _process_start(pid: int) -> str:
    """Start time of process ``pid`` in clock ticks since boot ("" if it does not exist)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            # The command name (field 2) may contain spaces: fields count from the last ")".
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""
