"""Leases: one named holder of a file at a time, renewed while it works, taken over once it is dead.

A lease is a small JSON file naming its holder (token, run or command, host, pid, the process's
start time) and when the lease expires. :meth:`Lease.acquire` creates it with an exclusive
create (``O_EXCL``-like locally; a conditional ``If-None-Match: *`` PUT on S3), so of two
holders starting at once exactly one gets it; the other gets :class:`LeaseHeldError` naming
the holder. The holder renews the lease (:class:`LeaseKeeper`, every third of the time to
live) and deletes it when done.

A holder that crashed cannot renew, so its lease expires after ``ttl`` seconds and the next
one takes it over. A holder on the same host whose process is gone is recognised at once (pid
plus the process's start time, so a reused pid is not mistaken for it), so a command restarted
after ``kill -9`` on the same machine does not wait for the expiry. Taking over deletes the old
lease (only if it is still the one read) and creates a new one exclusively.

Where leases are used: ``lease.json`` of a checkpoint directory (:class:`CheckpointLease`: one
training run writes a checkpoint), and an ``entity_path``'s import lease and reader files
(:mod:`storage.entity_lease`: one import writes it, never while a training run reads it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from storage import layout
from storage.errors import BadDataError, DataNotFound, StorageError
from storage.fs import atomic, changes, reads, urls

logger = logging.getLogger(__name__)

DEFAULT_TTL = 60.0
CHECKPOINT_BUSY = "the checkpoint is being written"


class LeaseHeldError(StorageError):
    """Another live holder has the lease."""


class LeaseLostError(StorageError):
    """This holder's lease expired and was taken over by another: it must not commit."""


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a lease and until when (the content of a lease file)."""

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
        return process_start(self.pid) != self.started

    def is_live(self) -> bool:
        """Unexpired, and not known to be dead."""
        return self.expires_at > time.time() and not self.is_dead_here()


class Lease:
    """The lease file ``name`` in ``directory``, for one holder.

    Args:
        directory: The directory the lease guards (created with the lease file if missing).
        run: A label for this holder (a Prefect flow run, a command line), shown to others.
        name: The lease file's path inside ``directory``.
        busy: What the holder is doing, for the refusal: ``"<busy> by run 'x' (pid ...)"``.
        ttl: Seconds the lease stays valid without renewal (env ``PBG_LEASE_TTL_SECONDS``).
        storage_options: Filesystem keyword arguments.
        token: This holder's token (default: a fresh one).
        prune_dir: Remove the lease file's directory when the release leaves it empty (a
            directory of many holders' files, such as an entity_path's readers).
    """

    def __init__(
        self,
        directory: str,
        run: str,
        *,
        name: str = layout.LEASE_FILE,
        busy: str = CHECKPOINT_BUSY,
        ttl: float | None = None,
        storage_options: Any = None,
        token: str | None = None,
        prune_dir: bool = False,
    ) -> None:
        self.url = urls.join_url(directory, name)
        self.prune_dir = prune_dir
        self.run = run
        self.busy = busy
        self.ttl = ttl if ttl is not None else float(os.environ.get("PBG_LEASE_TTL_SECONDS", DEFAULT_TTL))
        self.storage_options = storage_options
        self.token = token or uuid.uuid4().hex
        self.held = False

    def acquire(self) -> None:
        """Take the lease, or raise :class:`LeaseHeldError` naming the live holder."""
        for _ in range(3):
            try:
                created = atomic.create_exclusive(self.url, self._content(), self.storage_options)
            except FileNotFoundError:
                continue  # its directory was pruned by another holder's release meanwhile: again
            if created:
                self.held = True
                logger.info("lease on %s taken by run %r", self.url, self.run)
                return
            current = self.read()
            if current is None:
                continue  # released in between: try again
            if current.token == self.token:
                self.held = True
                return
            if current.is_live():
                raise LeaseHeldError(
                    self.url,
                    f"{self.busy} by {current.describe()}; wait for it, or delete this file if that run is known to be dead",
                )
            logger.warning(
                "taking over the lease on %s from %s (%s)",
                self.url,
                current.describe(),
                "expired" if current.expires_at <= time.time() else "its process is gone",
            )
            self.remove_if(current)
        raise LeaseHeldError(self.url, "another run keeps taking the lease; try again")

    def renew(self) -> None:
        """Extend the lease by ``ttl``; raises :class:`LeaseLostError` if another holder took it over."""
        current = self.read()
        if current is None or current.token != self.token:
            self.held = False
            holder = current.describe() if current is not None else "nobody (the file was deleted)"
            raise LeaseLostError(self.url, f"this run's lease was taken over by {holder}; stop before committing")
        atomic.write_text_atomic(self.url, self._content(), self.storage_options)

    def release(self) -> None:
        """Delete the lease if this holder still has it (idempotent; retryable after a storage error)."""
        if not self.held:
            return
        current = self.read()
        if current is not None and current.token == self.token:
            changes.remove(self.url, missing_ok=True, storage_options=self.storage_options)
            logger.info("lease on %s released", self.url)
            if self.prune_dir:
                with contextlib.suppress(OSError):  # another holder's file arrived meanwhile: it stays
                    changes.remove_empty_dir(self.url.rpartition("/")[0], self.storage_options)
        self.held = False

    def read(self) -> LeaseHolder | None:
        """The current holder, or None when nobody holds the lease.

        Raises:
            BadDataError: the lease file exists but is not a lease.
        """
        return read_holder(self.url, self.storage_options)

    def remove_if(self, expected: LeaseHolder) -> None:
        """Delete the lease file if it still holds ``expected`` (narrows the takeover race)."""
        current = self.read()
        if current is not None and current.token == expected.token:
            changes.remove(self.url, missing_ok=True, storage_options=self.storage_options)

    def _content(self) -> str:
        holder = LeaseHolder(
            token=self.token,
            run=self.run,
            host=socket.gethostname(),
            pid=os.getpid(),
            started=process_start(os.getpid()),
            expires_at=time.time() + self.ttl,
        )
        return json.dumps(asdict(holder))


class CheckpointLease(Lease):
    """The lease of one checkpoint directory (``lease.json``), for one training run.

    Args:
        checkpoint_url: The checkpoint directory.
        run: A label for this run (a Prefect flow run name or id), shown to others.
        ttl: Seconds the lease stays valid without renewal (env ``PBG_LEASE_TTL_SECONDS``).
        storage_options: Filesystem keyword arguments.
    """

    def __init__(self, checkpoint_url: str, run: str, ttl: float | None = None, storage_options: Any = None) -> None:
        super().__init__(checkpoint_url, run, ttl=ttl, storage_options=storage_options)


def read_holder(url: str, storage_options: Any = None) -> LeaseHolder | None:
    """The holder recorded in the lease file ``url``, or None when there is no such file.

    Raises:
        BadDataError: the file exists but is not a lease.
    """
    try:
        text = reads.read_text(url, storage_options)
    except DataNotFound:
        return None
    try:
        return LeaseHolder(**json.loads(text))
    except (ValueError, TypeError) as exc:
        raise BadDataError(url, f"not a lease file ({exc}); delete it if no run is using this directory") from None


class LeaseKeeper:
    """Renews a held lease from a daemon thread every third of its time to live, until stopped.

    A renewal that finds the lease taken over stops the thread and keeps the
    :class:`LeaseLostError` for :meth:`check`; other errors (a storage hiccup) are logged and
    the next renewal tries again.
    """

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        self.lost: LeaseLostError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew_until_stopped, name="pbg-lease", daemon=True)

    def start(self) -> LeaseKeeper:
        """Start renewing; returns ``self``."""
        self._thread.start()
        return self

    def check(self) -> None:
        """Raise the :class:`LeaseLostError` the renewals saw, if any."""
        if self.lost is not None:
            raise self.lost

    def stop(self) -> None:
        """Stop renewing (the lease itself stays until released)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _renew_until_stopped(self) -> None:
        interval = max(self.lease.ttl / 3.0, 0.05)
        while not self._stop.wait(interval):
            try:
                self.lease.renew()
            except LeaseLostError as exc:
                self.lost = exc
                logger.error("%s", exc)
                return
            except Exception as exc:  # noqa: BLE001 - keep renewing through storage hiccups
                if not getattr(exc, "transient", False):
                    logger.warning("could not renew the lease on %s: %s", self.lease.url, exc)


@contextlib.contextmanager
def kept(lease: Lease) -> Iterator[LeaseKeeper]:
    """Renew the already acquired ``lease`` while the block runs; release it at the end."""
    keeper = LeaseKeeper(lease).start()
    try:
        yield keeper
    finally:
        keeper.stop()
        try:
            lease.release()
        except StorageError as exc:  # it expires by itself; the block's own outcome matters more
            logger.warning("could not release the lease on %s (it expires by itself): %s", lease.url, exc)


def process_start(pid: int) -> str:
    """Start time of process ``pid`` in clock ticks since boot ("" if it does not exist)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            # The command name (field 2) may contain spaces: fields count from the last ")".
            return f.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""
