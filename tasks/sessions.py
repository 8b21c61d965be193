"""Open and close the in-process training session, and look it up by handle.

Tasks never receive big tensors: the flow holds a short string handle and each
task resolves it here to the live :class:`pbg_core.session.engine.TrainingSession`
owned by this process, kept in a :class:`tasks.runs.Registry` with the handle of the run it
was built for. The handle also resolves to that run (:func:`session_run`), so tasks that open
more stores (evaluation's edge paths) use its credentials without them ever being a task
parameter, and without a second copy of them here.

The checkpoint's ``config.json`` is written with credentials masked (``config_to_json``);
a resumed run takes them from its own config or the environment, never from that file.

A session is built on its run's stores (:mod:`tasks.runs`): ``open-training-session`` and
``open-eval-session`` take the run's handle, never the config.

``pbg train`` opens the session ahead (:func:`prepare_training_session`), while its API server
starts, on stores opened ahead for its run (:func:`tasks.runs.open_stores_ahead`), and reads
the first bucket's partitions and edges into it; the ``open-training-session`` task then adopts
it if it still holds: built on this run's stores (same config), and the checkpoint's committed
version and the entity_path's import unchanged now that the run holds its leases. Otherwise it is closed and the task opens a
fresh one, as a deployed run always does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.session.build import build_session
from pbg_core.session.engine import TrainingSession
from storage.importing.manifest import import_stamp
from storage.run_stores import RunStores
from tasks._policies import plain_task, run_logger, storage_task
from tasks.new_rows import starts_new_rows
from tasks.plan import run_iterations
from tasks.runs import Registry, Run, fingerprint, get_run, open_stores_ahead


@dataclass(frozen=True)
class _Live:
    """A live session and the handle of the run (:mod:`tasks.runs`) it was built on."""

    session: TrainingSession
    run: str


_SESSIONS: Registry[_Live] = Registry("training session")
_PREPARED: dict[str, TrainingSession] = {}  # config fingerprint -> a session opened ahead of its flow
_IMPORTS: dict[
    str, str | None
] = {}  # config fingerprint -> the import it read (storage.importing.manifest.import_stamp)


def get_session(handle: str) -> TrainingSession:
    """The live session for ``handle``.

    Raises:
        LookupError: when the handle belongs to no open session of this process.
    """
    return _SESSIONS.get(handle).session


def session_run(handle: str) -> Run:
    """The run (config and stores) the session of ``handle`` was built on.

    Raises:
        LookupError: when the handle belongs to no open session, or its run was closed.
    """
    return get_run(_SESSIONS.get(handle).run)


def register_session(session: TrainingSession, run: str, prefix: str = "train") -> str:
    """Keep ``session``, built on the run of handle ``run``, alive in this process; returns its handle."""
    return _SESSIONS.add(prefix, _Live(session, run))


def unregister_session(handle: str) -> TrainingSession | None:
    """Forget the session of ``handle`` (not closed); None when it was not open (idempotent)."""
    live = _SESSIONS.pop(handle)
    return live.session if live is not None else None


def prepare_training_session(config: ConfigSchema) -> bool:
    """Open the session of ``config`` ahead of its flow (a plain function, not a task).

    A hint, never an error: whatever fails here (a missing file, a bad checkpoint) fails again
    in the flow's own checks, which report it in the run. Returns whether a session is ready.
    """
    close_prepared_sessions()
    log = logging.getLogger(__name__)
    try:
        stores = open_stores_ahead(config)
        if starts_new_rows(config, stores.checkpoint.read_version()):
            return False  # the rows init_path lacks start from a file the flow writes first (tasks/new_rows.py)
        _IMPORTS[fingerprint(config)] = import_stamp(config.entity_path, config.storage_options_for_fs())
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
    _IMPORTS.clear()


def _adopt_prepared(config: ConfigSchema, stores: RunStores) -> TrainingSession | None:
    """The session opened ahead for ``config`` if it is built on ``stores`` and the checkpoint
    is still where it found it."""
    session = _PREPARED.pop(fingerprint(config), None)
    read = _IMPORTS.pop(fingerprint(config), None)
    close_prepared_sessions()  # any other one is of another config
    if session is None:
        return None
    moved = session.residency.committed_version != stores.checkpoint.read_version()  # another run committed
    # An import committed between the session's reads and the run's reader lease: read the entities again.
    moved = moved or read != import_stamp(config.entity_path, config.storage_options_for_fs())
    if session.store is not stores.checkpoint or moved:
        session.close()  # start from this run's stores, and from what is committed now
        return None
    return session


@storage_task(name="open-training-session", task_run_name="open training session")
def open_training_session(run: str) -> str:
    """Read counts and the committed checkpoint, start the HOGWILD workers; returns a handle.

    ``run``: the run's handle (:mod:`tasks.runs`), whose stores the session trains on. Adopts
    the session :func:`prepare_training_session` opened ahead, if it still holds.
    """
    logger = run_logger()
    config, stores = get_run(run).config, get_run(run).stores
    session = _adopt_prepared(config, stores) or build_session(config, stores)
    stores.checkpoint.save_config(config_to_json(config))  # secrets masked
    handle = register_session(session, run)
    logger.info(
        "session %s: %d workers, committed version %d, seed %d",
        handle,
        session.workers.num_workers,
        session.residency.committed_version,
        session.seed,
    )
    return handle


@plain_task(name="close-training-session", task_run_name="close training session")
def close_training_session(handle: str) -> None:
    """Stop the workers and free shared memory (idempotent)."""
    live = _SESSIONS.pop(handle)
    if live is not None:
        live.session.close()
