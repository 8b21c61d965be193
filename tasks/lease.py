"""Hold the checkpoint's lease, and a reader's lease on the entity_path, for the whole training run.

:func:`acquire_lease` takes the checkpoint's lease (:mod:`storage.lease`) before the session
opens (a second run on the same checkpoint fails here, naming the holder), then a reader's
lease on the config's entity_path (:mod:`storage.entity_lease`: a run fails here, naming the
import, while ``pbg import`` writes it, and no import starts while the run reads it); daemon
threads renew both every third of their time to live. :func:`check_lease` is called before the
version pointer moves: a run whose lease was lost (it stalled past the expiry and another run
took over) stops instead of committing over the other run's work.
:func:`reading_entities` holds a reader's lease alone (``pbg eval``); :func:`hold_lease` the lease of
any directory (a retraining run's root).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from storage.entity_lease import acquire_reader, reader_lease, reading
from storage.lease import CheckpointLease, LeaseKeeper
from storage.pause_points import pause_point
from tasks._policies import is_transient, storage_task
from tasks.runs import get_run

logger = logging.getLogger(__name__)


@dataclass
class _Held:
    """The leases this run holds (its checkpoint's, and a reader's on its entity_path), each renewed."""

    keepers: list[LeaseKeeper] = field(default_factory=list)


_HELD: dict[str, _Held] = {}


def _run_label() -> str:
    """The Prefect flow run's name and id when inside one, else "pbg"."""
    try:
        from prefect.runtime import flow_run

        name, run_id = flow_run.name, flow_run.id
        return f"{name} ({run_id})" if run_id else "pbg"
    except Exception:  # noqa: BLE001 - a label is best effort
        return "pbg"


@storage_task(name="acquire-checkpoint-lease", task_run_name="acquire checkpoint lease")
def acquire_lease(run: str) -> str:
    """Take the lease of the run's checkpoint directory, then a reader's on its entity_path; returns
    their key (the checkpoint path).

    ``run``: the run's handle (:mod:`tasks.runs`); each lease is written with its store's
    filesystem options. The reader's lease (:mod:`storage.entity_lease`) keeps imports out of the
    entity_path while the run trains on it.

    Raises:
        storage.lease.LeaseHeldError: another live run holds the checkpoint, or an import writes
            the entity_path (named in the message); no lease is left held.
    """
    stores = get_run(run).stores
    checkpoint, entities = stores.checkpoint, stores.entities
    lease = CheckpointLease(checkpoint.url, _run_label(), storage_options=checkpoint.storage_options)
    lease.acquire()
    reader = reader_lease(entities.url, _run_label(), entities.storage_options)
    try:
        acquire_reader(reader, entities.url)  # not held: a read-only entity_path (warned)
    except BaseException:
        lease.release()
        raise
    _HELD[checkpoint.url] = _Held([LeaseKeeper(held).start() for held in (lease, reader) if held.held])
    pause_point("train-leases-held")
    return checkpoint.url


def hold_lease(url: str, storage_options: Any = None) -> str:
    """Take the lease of directory ``url`` (its ``lease.json``) and renew it until
    :func:`release_lease` (its key: ``url``); a retraining run holds its run root's this way.

    Raises:
        storage.lease.LeaseHeldError: another live run holds it (named in the message).
    """
    lease = CheckpointLease(url, _run_label(), storage_options=storage_options)
    lease.acquire()
    _HELD[url] = _Held([LeaseKeeper(lease).start()])
    return url


def check_lease(key: str) -> None:
    """Raise the :class:`LeaseLostError` a renewing thread saw, if any (no-op for unknown keys)."""
    for keeper in _HELD[key].keepers if key in _HELD else []:
        keeper.check()


@storage_task(name="release-checkpoint-lease", task_run_name="release checkpoint lease")
def release_lease(key: str) -> None:
    """Stop renewing and delete the leases (idempotent)."""
    held = _HELD.get(key)
    if held is None:
        return
    for keeper in held.keepers:
        keeper.stop()
        try:
            keeper.lease.release()
        except Exception as exc:
            if is_transient(exc):
                raise  # retried by the task (the leases released already are not released twice)
            logger.warning("could not release the lease on %s (it expires by itself): %s", keeper.lease.url, exc)
    _HELD.pop(key, None)


@contextmanager
def reading_entities(run: str) -> Iterator[None]:
    """Hold a reader's lease on the run's entity_path while the block runs (``pbg eval``): no import
    changes the entity files under it, and none is under way when it starts.

    Raises:
        storage.lease.LeaseHeldError: an import writes the entity_path (named in the message).
    """
    entities = get_run(run).stores.entities
    with reading(entities.url, _run_label(), entities.storage_options):
        yield
