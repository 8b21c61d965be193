"""What runs on a Dask worker of a distributed run: one :class:`~pbg_core.distributed.machine.Machine`.

Dask pickles the functions it sends by reference, so the worker imports this module (every
worker needs this package at the coordinator's version; checked at start). A worker keeps one
machine per run, under the run's token: built on its first bucket (the config's stores opened
here, bucket progress written straight to the shared checkpoint, the HOGWILD workers started
here), reused for every later bucket, closed by :func:`close_machine` at the end of the run or
when a bucket of another run arrives (a run that crashed never closed its machines).

Closing never waits for a bucket: the coordinator closes its machines when the run ends, fails
or is interrupted, and a bucket still training then is abandoned at once (the run records it
no more; the rerun trains it again from its partitions' last recorded saves). Dask cannot stop
a running task, and :func:`close_machine` runs on the worker's event loop, which must not
block; so it raises :class:`_Abandon` in the training thread (``PyThreadState_SetAsyncExc``,
delivered at the thread's next Python instruction: within a batch, or within a second of a
wait on storage). :class:`_Abandon` is a ``BaseException``, so no ``except Exception`` of the
engine swallows it, and the HOGWILD pool, seeing it, stops its children without waiting
(:meth:`pbg_core.parallel.pool.WorkerPool.run_alongside`). The machine is then closed and the
task ends with :class:`~pbg_core.errors.BucketAbandoned`. The exception is only ever raised in
a thread registered as training the run's bucket, and the thread leaves that registration
under the same lock, cancelling a stop not delivered yet, so it cannot land in Dask's own code.

The machine's log lines of a bucket go back with its outcome, so they show in the run's logs.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pbg_core.config import ConfigSchema
from pbg_core.distributed.assignments import Assignment, Outcome
from pbg_core.distributed.machine import Machine
from pbg_core.errors import BucketAbandoned
from pbg_core.session.build import build_session
from storage.run_stores import open_run_stores

logger = logging.getLogger(__name__)

_MACHINES: dict[str, Machine] = {}  # run token -> this worker's machine of that run
_LOCK = threading.Lock()  # one bucket at a time on a worker, whatever its thread count
_STATE = threading.Lock()  # guards the three tables here; never held while training
_TRAINING: dict[str, int] = {}  # run token -> the thread training its bucket now
_CLOSED: set[str] = set()  # runs whose machines were closed: a later bucket of theirs is abandoned


class _Abandon(BaseException):
    """Raised in a training thread by :func:`close_machine`: the bucket's run closed."""


def train_on_machine(token: str, config: ConfigSchema, assignment: Assignment) -> Outcome:
    """Train ``assignment`` on this worker's machine of run ``token`` (built on first use).

    Raises:
        BucketAbandoned: the run closed its machines before the bucket was done.
    """
    with _LOCK:
        try:
            with _captured_logs() as lines, _training(token):
                outcome = _machine(token, config).train(assignment)
        except _Abandon:
            _close(token)
            raise BucketAbandoned(
                f"bucket {tuple(assignment.bucket)} of {assignment.iteration.label} abandoned: its run closed "
                "its machines while it trained (a rerun trains it again)"
            ) from None
    outcome.logs = lines
    return outcome


def close_machine(token: str) -> bool:
    """Close this worker's machine of run ``token`` without waiting; whether there was one.

    A bucket of that run training now is abandoned: its thread stops at once and closes the
    machine itself. Runs on the worker's event loop (``Client.run``).
    """
    with _STATE:
        _CLOSED.add(token)
        thread = _TRAINING.pop(token, None)
        if thread is not None:
            _raise_in(thread, _Abandon)
            return True
    return _close(token)


def open_machines() -> list[str]:
    """Tokens of the runs with a machine on this worker (for tests and diagnostics)."""
    with _STATE:
        return sorted(_MACHINES)


@contextmanager
def _training(token: str) -> Iterator[None]:
    """Register this thread as training run ``token``'s bucket (where :func:`close_machine` may stop it).

    On the way out, a stop that was asked for but not delivered yet is cancelled and raised
    here instead: nothing is left pending to land in Dask's code after the bucket.
    """
    with _STATE:
        if token in _CLOSED:
            raise _Abandon
        _TRAINING[token] = threading.get_ident()
    try:
        yield
    finally:
        with _STATE:
            stopped = _TRAINING.pop(token, None) is None  # close_machine took the registration
            if stopped:
                _raise_in(threading.get_ident(), None)
        if stopped:
            raise _Abandon


def _raise_in(thread: int, exc: type[BaseException] | None) -> None:
    """Make ``thread`` raise ``exc`` at its next Python instruction (None: cancel a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc) if exc else None)


def _close(token: str) -> bool:
    with _STATE:
        machine = _MACHINES.pop(token, None)
    if machine is not None:
        machine.close()
    return machine is not None


def _machine(token: str, config: ConfigSchema) -> Machine:
    with _STATE:
        machine = _MACHINES.get(token)
        others = [_MACHINES.pop(other) for other in list(_MACHINES) if other != token]
    for other in others:  # another run's, left behind (a run that crashed): free its memory first
        other.close()
    if machine is not None:
        return machine
    undo_dask_malloc_trim()
    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)  # the HOGWILD children inherit the environment
    session = build_session(config, open_run_stores(config, staged=False), read_ahead=False)
    machine = Machine(session)
    with _STATE:
        _MACHINES[token] = machine
    return machine


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's largest dynamic mmap threshold (64-bit)
_TRIM_THRESHOLD = 2 * _MMAP_THRESHOLD


def undo_dask_malloc_trim() -> bool:
    """Give this worker glibc's default allocation behaviour back; whether it could.

    Dask's nanny starts each worker with ``MALLOC_TRIM_THRESHOLD_=65536``, so that a worker
    holding data frames returns freed memory to the OS. Setting it also freezes glibc's mmap
    threshold at 128 KiB: every temporary array of a training batch above that is a fresh
    mmap, page-faulted in, then unmapped. Measured on this project's training step: 2.7x slower
    per edge than the same process without it. These are the values glibc's dynamic threshold
    reaches on its own.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(
            libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
        )
    except (OSError, AttributeError):  # not glibc: nothing to undo
        return False


@contextmanager
def _captured_logs() -> Iterator[list[tuple[str, bool]]]:
    """INFO and above of the engine's loggers while the block runs: (line, is a step line)."""
    lines: list[tuple[str, bool]] = []
    handler = _ListHandler(lines)
    handler.setFormatter(logging.Formatter("%(message)s"))
    engine = logging.getLogger("pbg_core")
    previous = engine.level
    if engine.getEffectiveLevel() > logging.INFO:
        engine.setLevel(logging.INFO)
    engine.addHandler(handler)
    try:
        yield lines
    finally:
        engine.removeHandler(handler)
        engine.setLevel(previous)


class _ListHandler(logging.Handler):
    def __init__(self, lines: list[tuple[str, bool]]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((self.format(record), bool(getattr(record, "pbg_step", False))))
