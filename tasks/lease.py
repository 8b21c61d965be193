"""Hold the checkpoint's lease for the whole training run (storage.lease).

:func:`acquire_lease` takes the lease before the session opens (a second run on the
same checkpoint fails here, naming the holder) and starts a daemon thread renewing it
every third of its time to live. :func:`check_lease` is called before the version
pointer moves: a run whose lease was lost (it stalled past the expiry and another run
took over) stops instead of committing over the other run's work.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from prefect import task

from storage.lease import CheckpointLease, LeaseLostError
from tasks._policies import NO_CACHE, STORAGE_RETRIES, STORAGE_RETRY_DELAYS, is_transient, retry_if_transient
from tasks.runs import get_run

logger = logging.getLogger(__name__)


@dataclass
class _Held:
    """A lease held by this process and the thread renewing it."""

    lease: CheckpointLease
    stop: threading.Event = field(default_factory=threading.Event)
    lost: LeaseLostError | None = None
    thread: threading.Thread | None = None


_HELD: dict[str, _Held] = {}


def _run_label() -> str:
    """The Prefect flow run's name and id when inside one, else "pbg"."""
    try:
        from prefect.runtime import flow_run

        name, run_id = flow_run.name, flow_run.id
        return f"{name} ({run_id})" if run_id else "pbg"
    except Exception:  # noqa: BLE001 - a label is best effort
        return "pbg"


def _renew_until_stopped(held: _Held) -> None:
    interval = max(held.lease.ttl / 3.0, 0.05)
    while not held.stop.wait(interval):
        try:
            held.lease.renew()
        except LeaseLostError as exc:
            held.lost = exc
            logger.error("%s", exc)
            return
        except Exception as exc:  # noqa: BLE001 - keep renewing through storage hiccups
            if not is_transient(exc):
                logger.warning("could not renew the lease on %s: %s", held.lease.url, exc)


@task(
    name="acquire-checkpoint-lease",
    task_run_name="acquire checkpoint lease",
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)
def acquire_lease(run: str) -> str:
    """Take the lease of the run's checkpoint directory; returns its key (the checkpoint path).

    ``run``: the run's handle (:mod:`tasks.runs`); the lease is written with its checkpoint
    store's filesystem options.

    Raises:
        storage.lease.LeaseHeldError: another live run holds it (named in the message).
    """
    checkpoint = get_run(run).stores.checkpoint
    return hold_lease(checkpoint.url, checkpoint.storage_options)


def hold_lease(url: str, storage_options: Any = None) -> str:
    """Take the lease of directory ``url`` and renew it until :func:`release_lease` (its key: ``url``).

    Raises:
        storage.lease.LeaseHeldError: another live run holds it (named in the message).
    """
    lease = CheckpointLease(url, _run_label(), storage_options=storage_options)
    lease.acquire()
    held = _Held(lease=lease)
    held.thread = threading.Thread(target=_renew_until_stopped, args=(held,), name="pbg-lease", daemon=True)
    held.thread.start()
    _HELD[url] = held
    return url


def check_lease(key: str) -> None:
    """Raise the :class:`LeaseLostError` the renewing thread saw, if any (no-op for unknown keys)."""
    held = _HELD.get(key)
    if held is not None and held.lost is not None:
        raise held.lost


@task(
    name="release-checkpoint-lease",
    task_run_name="release checkpoint lease",
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)
def release_lease(key: str) -> None:
    """Stop renewing and delete the lease (idempotent)."""
    held = _HELD.get(key)
    if held is None:
        return
    held.stop.set()
    if held.thread is not None:
        held.thread.join(timeout=5)
    try:
        held.lease.release()
    except Exception as exc:
        if is_transient(exc):
            raise  # retried by the task
        logger.warning("could not release the lease on %s (it expires by itself): %s", held.lease.url, exc)
    _HELD.pop(key, None)
