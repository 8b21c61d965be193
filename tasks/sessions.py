"""Open and close the in-process training session, and look it up by handle.

Tasks never receive big tensors: the flow holds a short string handle and each
task resolves it here to the live :class:`pbg_core.engine.TrainingSession`
owned by this process.
"""

from __future__ import annotations

import uuid

from prefect import task

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.engine import TrainingSession
from pbg_core.session_build import build_session
from storage.run_stores import open_run_stores
from tasks._policies import NO_CACHE, STORAGE_RETRIES, STORAGE_RETRY_DELAYS, retry_if_transient, run_logger

_SESSIONS: dict[str, TrainingSession] = {}


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


def register_session(session: TrainingSession, prefix: str = "train") -> str:
    """Keep ``session`` alive in this process and return its handle."""
    handle = f"{prefix}-{uuid.uuid4().hex[:12]}"
    _SESSIONS[handle] = session
    return handle


@task(name="open-training-session", cache_policy=NO_CACHE, retries=STORAGE_RETRIES,
      retry_delay_seconds=STORAGE_RETRY_DELAYS, retry_condition_fn=retry_if_transient)
def open_training_session(config: ConfigSchema) -> str:
    """Read counts and the committed checkpoint, start the HOGWILD workers; returns a handle."""
    logger = run_logger()
    stores = open_run_stores(config)
    session = build_session(config, stores)
    stores.checkpoint.save_config(config_to_json(config))
    handle = register_session(session)
    logger.info(
        "session %s: %d workers, committed version %d, seed %d",
        handle, session.workers.num_workers, session.residency.committed_version, session.seed,
    )
    return handle


@task(name="close-training-session", cache_policy=NO_CACHE)
def close_training_session(handle: str) -> None:
    """Stop the workers and free shared memory (idempotent)."""
    session = _SESSIONS.pop(handle, None)
    if session is not None:
        session.close()
