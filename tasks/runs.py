"""The run's config and stores, opened once per run and looked up by handle.

A flow opens its run once (:func:`opened_run`, right after resolving the config) and hands
the short handle to every task that reads or writes the run's data: the input checks and the
plan, the lease, the leftovers' clean-up, the training or evaluation session, the retraining
bookkeeping (and the summary artifact). Tasks resolve it here (:func:`get_run`), so the stores
(:class:`storage.run_stores.RunStores`) have one owner per run and the config is never a task
parameter: Prefect 3.9 records a task run's inputs only as links to the runs that produced
them, but a cache policy keyed on inputs would pickle and hash the whole config, credentials
included, on every call. A handle names state of this process only, so the tasks taking one
keep ``NO_CACHE`` (:mod:`tasks._policies`); a retry of such a task runs in the same flow run,
where its handle is still open, and a rerun of the flow run opens its run again.

``pbg train`` opens the stores ahead of its flow (:func:`open_stores_ahead`, with the session it
prepares); the flow's :func:`opened_run` adopts them when the config is the same, so they are
opened once there too.

:class:`Registry` is the one lookup by handle of this package: the runs here and the live
sessions of :mod:`tasks.sessions` are each kept in one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from pbg_core.config import ConfigSchema
from storage.run_stores import RunStores, open_run_stores


@dataclass(frozen=True)
class Run:
    """One run: its validated config and the stores opened from it."""

    config: ConfigSchema
    stores: RunStores


T = TypeVar("T")


class Registry(Generic[T]):
    """Objects alive in this process, each under a short string handle that tasks pass around.

    ``what`` names the kind of object in the lookup error ("run", "training session").
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, T] = {}

    def add(self, prefix: str, item: T) -> str:
        """Keep ``item``; returns its new handle, ``<prefix>-<12 hex>``."""
        handle = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self._items[handle] = item
        return handle

    def put(self, handle: str, item: T) -> None:
        """Keep ``item`` under an existing handle (another registry's: one handle, two views of a run)."""
        self._items[handle] = item

    def get(self, handle: str) -> T:
        """The object of ``handle``.

        Raises:
            LookupError: when the handle belongs to no object of this registry in this process.
        """
        try:
            return self._items[handle]
        except KeyError:
            raise LookupError(
                f"{self.what} {handle!r} is not open in this process (open: {sorted(self._items) or 'none'}); "
                f"{self.what}s live only inside the flow run that opened them"
            ) from None

    def pop(self, handle: str) -> T | None:
        """Forget ``handle``; returns its object, None when it was not there (idempotent)."""
        return self._items.pop(handle, None)


_RUNS: Registry[Run] = Registry("run")
_AHEAD: dict[str, RunStores] = {}  # config fingerprint -> stores opened before the run's flow


def fingerprint(config: ConfigSchema) -> str:
    """Equal for equal configs (secrets masked: two configs differing only in credentials match)."""
    return config.model_dump_json()


def open_stores_ahead(config: ConfigSchema) -> RunStores:
    """Open the stores of a run about to start; its :func:`opened_run` adopts them (others are dropped)."""
    _AHEAD.clear()
    stores = _AHEAD[fingerprint(config)] = open_run_stores(config)
    return stores


def open_run(config: ConfigSchema) -> str:
    """Register the run of ``config`` with its stores (those opened ahead for it, else new); returns its handle."""
    stores = _AHEAD.pop(fingerprint(config), None)
    _AHEAD.clear()  # opened for another config
    return _RUNS.add("run", Run(config, stores if stores is not None else open_run_stores(config)))


def close_run(handle: str) -> None:
    """Forget the run (idempotent); its sessions are closed by their own tasks."""
    _RUNS.pop(handle)


@contextmanager
def opened_run(config: ConfigSchema) -> Iterator[str]:
    """:func:`open_run` for the ``with`` block, :func:`close_run` after it."""
    handle = open_run(config)
    try:
        yield handle
    finally:
        close_run(handle)


def get_run(handle: str) -> Run:
    """The open run of ``handle``.

    Raises:
        LookupError: when the handle belongs to no open run of this process.
    """
    return _RUNS.get(handle)
