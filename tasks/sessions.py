"""Open and close the in-process training session, and look it up by handle.

Tasks never receive big tensors: the flow holds a short string handle and each
task resolves it here to the live :class:`pbg_core.session.engine.TrainingSession`
owned by this process. The handle also resolves to the run's real filesystem options
(:func:`session_storage_options`), so tasks that open more stores (evaluation's edge
paths) use the same credentials without them ever being a task parameter.

The checkpoint's ``config.json`` is written with credentials masked (``config_to_json``);
a resumed run takes them from its own config or the environment, never from that file.

A session is built on its run's stores (:mod:`tasks.runs`): ``open-training-session`` and
``open-eval-session`` take the run's handle, never the config.

``pbg train`` opens the session ahead (:func:`prepare_training_session`), while its API server
starts, on stores opened ahead for its run (:func:`tasks.runs.open_stores_ahead`), and reads
the first bucket's partitions and edges into it; the ``open-training-session`` task then adopts
it if it still holds: built on this run's stores (same config), and the checkpoint's committed
version unchanged now that the run holds the lease. Otherwise it is closed and the task opens a
fresh one, as a deployed run always does.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from prefect import task

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.session.build import build_session
from pbg_core.session.engine import TrainingSession
from storage.run_stores import RunStores
from tasks._policies import NO_CACHE, STORAGE_RETRIES, STORAGE_RETRY_DELAYS, retry_if_transient, run_logger
from tasks.plan import run_iterations
from tasks.runs import fingerprint, get_run, open_stores_ahead

_SESSIONS: dict[str, TrainingSession] = {}
_STORAGE_OPTIONS: dict[str, dict[str, Any]] = {}
_PREPARED: dict[str, TrainingSession] = {}  # config fingerprint -> a session opened ahead of its flow


def get_session(handle: str) -> TrainingSession:
    """The live session for ``handle``.

    Raises:
        LookupError: when the handle belongs to no open session of this process.
    """
    try:
        return _SESSIONS[handle]
    except KeyError:
        raise LookupError(
            f"training session {handle!r} is not open in this process (open: {sorted(_SESSIONS) or 'none'}); "
            "sessions live only inside the flow run that opened them"
        ) from None


def session_storage_options(handle: str) -> dict[str, Any]:
    """The fsspec options of the session's stores (secrets in clear: never log or return them).

    Raises:
        LookupError: when the handle belongs to no open session of this process.
    """
    get_session(handle)
    return _STORAGE_OPTIONS.get(handle, {})


def register_session(
    session: TrainingSession, prefix: str = "train", storage_options: dict[str, Any] | None = None
) -> str:
    """Keep ``session`` (and the fsspec options of its stores) alive in this process; returns its handle."""
    handle = f"{prefix}-{uuid.uuid4().hex[:12]}"
    _SESSIONS[handle] = session
    _STORAGE_OPTIONS[handle] = dict(storage_options or {})
    return handle


def prepare_training_session(config: ConfigSchema) -> bool:
    """Open the session of ``config`` ahead of its flow (a plain function, not a task).

    A hint, never an error: whatever fails here (a missing file, a bad checkpoint) fails again
    in the flow's own checks, which report it in the run. Returns whether a session is ready.
    """
    close_prepared_sessions()
    log = logging.getLogger(__name__)
    try:
        stores = open_stores_ahead(config)
        session = _PREPARED[fingerprint(config)] = build_session(config, stores)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.debug("could not open the session ahead: %s", exc)
        return False
    try:  # the first iteration's partitions and edges, while the server still starts
        iterations = run_iterations(config, stores)[1]
        if session.residency.committed_version < len(iterations):
            session.preload(iterations[session.residency.committed_version])
    except Exception as exc:  # noqa: BLE001 - the run's own load reads (and reports) it again
        log.debug("could not read the first bucket ahead: %s", exc)
    return True


def close_prepared_sessions() -> None:
    """Close sessions opened ahead and never adopted (idempotent)."""
    while _PREPARED:
        _PREPARED.popitem()[1].close()


def _adopt_prepared(config: ConfigSchema, stores: RunStores) -> TrainingSession | None:
    """The session opened ahead for ``config`` if it is built on ``stores`` and the checkpoint
    is still where it found it."""
    session = _PREPARED.pop(fingerprint(config), None)
    close_prepared_sessions()  # any other one is of another config
    if session is None:
        return None
    moved = session.residency.committed_version != stores.checkpoint.read_version()  # another run committed
    if session.store is not stores.checkpoint or moved:
        session.close()  # start from this run's stores, and from what is committed now
        return None
    return session


@task(
    name="open-training-session",
    task_run_name="open training session",
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)
def open_training_session(run: str) -> str:
    """Read counts and the committed checkpoint, start the HOGWILD workers; returns a handle.

    ``run``: the run's handle (:mod:`tasks.runs`), whose stores the session trains on. Adopts
    the session :func:`prepare_training_session` opened ahead, if it still holds.
    """
    logger = run_logger()
    config, stores = get_run(run).config, get_run(run).stores
    session = _adopt_prepared(config, stores) or build_session(config, stores)
    stores.checkpoint.save_config(config_to_json(config))  # secrets masked
    handle = register_session(session, storage_options=config.storage_options_for_fs())
    logger.info(
        "session %s: %d workers, committed version %d, seed %d",
        handle,
        session.workers.num_workers,
        session.residency.committed_version,
        session.seed,
    )
    return handle


@task(name="close-training-session", task_run_name="close training session", cache_policy=NO_CACHE)
def close_training_session(handle: str) -> None:
    """Stop the workers and free shared memory (idempotent)."""
    session = _SESSIONS.pop(handle, None)
    _STORAGE_OPTIONS.pop(handle, None)
    if session is not None:
        session.close()
