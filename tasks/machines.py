"""What runs on a Dask worker of a distributed run: one :class:`~pbg_core.distributed.machine.Machine`.

Dask pickles the functions it sends by reference, so the worker imports this module (every
worker needs this package at the coordinator's version; checked at start). A worker keeps one
machine per run, under the run's token: built on its first bucket (the config's stores opened
here, bucket progress written straight to the shared checkpoint, the HOGWILD workers started
here), reused for every later bucket, closed by :func:`close_machine` at the end of the run or
when a bucket of another run arrives (a run that crashed never closed its machines).

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
from pbg_core.session.build import build_session
from storage.run_stores import open_run_stores

logger = logging.getLogger(__name__)

_MACHINES: dict[str, Machine] = {}  # run token -> this worker's machine of that run
_LOCK = threading.Lock()  # a worker with several threads still trains one bucket at a time per run


def train_on_machine(token: str, config: ConfigSchema, assignment: Assignment) -> Outcome:
    """Train ``assignment`` on this worker's machine of run ``token`` (built on first use)."""
    with _LOCK, _captured_logs() as lines:
        machine = _machine(token, config)
        outcome = machine.train(assignment)
    outcome.logs = lines
    return outcome


def close_machine(token: str) -> bool:
    """Close this worker's machine of run ``token``, if any (its HOGWILD workers, its memory)."""
    with _LOCK:
        machine = _MACHINES.pop(token, None)
        if machine is not None:
            machine.close()
        return machine is not None


def open_machines() -> list[str]:
    """Tokens of the runs with a machine on this worker (for tests and diagnostics)."""
    return sorted(_MACHINES)


def _machine(token: str, config: ConfigSchema) -> Machine:
    machine = _MACHINES.get(token)
    if machine is not None:
        return machine
    for other in list(_MACHINES):  # another run's, left behind: free its memory first
        _MACHINES.pop(other).close()
    undo_dask_malloc_trim()
    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)  # the HOGWILD children inherit the environment
    session = build_session(config, open_run_stores(config, staged=False), read_ahead=False)
    machine = _MACHINES[token] = Machine(session)
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
