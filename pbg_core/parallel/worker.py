"""Child side of :class:`pbg_core.parallel.pool.WorkerPool`: the worker loop and the wire protocol.

Kept apart from :mod:`pbg_core.parallel.pool` so the forkserver can preload it (with
torch) and every child starts by forking an already-warm process.

Protocol over one duplex Unix-socket pipe per worker:

- a child started ahead of its session first receives ``(init_fn, init_payload)`` as a job;
- child sends ``("ready", pid)`` after ``init_fn`` or ``("error", packed)`` if it raised;
- parent sends a job ``(fn, args)`` (:func:`encode_job` + :func:`send_job`); child
  replies ``("ok", result)`` or ``("error", packed)`` with plain ``Connection.send``;
- parent sends the job ``None`` (or closes the pipe): child exits.

Jobs carry their shared-memory file descriptors *in band* (``SCM_RIGHTS`` on the
same socket). torch pickles a shared CPU tensor as a file descriptor wrapped in
``multiprocessing.reduction.DupFd``; outside process start-up that goes through
multiprocessing's resource-sharer thread, one authenticated connection per
storage (~2 ms each, i.e. ~20 ms per call for a bucket's edges on 2 workers).
Sending them with the job costs microseconds.

``packed`` is :func:`pack_exception`'s tuple; :func:`unpack_exception` rebuilds it.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing import context, reduction
from multiprocessing.connection import Connection
from typing import Any

import torch

PackedException = tuple[bytes | None, str, str, str]  # (pickle, type name, message, traceback)

_FDS_PER_MESSAGE = 250  # below the kernel's SCM_MAX_FD (253)
_COUNT_BYTES = 4
# Descriptors received with the job being unpickled, by their index in the job.
_received_fds: dict[int, int] = {}


def worker_main(
    index: int,
    conn: Connection,
    init_fn: Callable[[int, Any], Any] | None,
    init_payload: Any,
    owner_pid: int | None = None,
) -> None:
    """Entry point of a worker process: init once, then serve jobs until told to stop.

    ``owner_pid`` is the process that started the pool: the worker exits when it dies. A
    worker started ahead of its session (``init_fn`` None, see :mod:`pbg_core.parallel.worker_boot`)
    receives ``(init_fn, init_payload)`` as its first message.
    """
    # One thread per worker: HOGWILD parallelism comes from processes, and intra-op
    # threads of several workers would oversubscribe the cores.
    torch.set_num_threads(1)
    # Ctrl-C reaches the whole process group; the parent handles it and closes the pool.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if owner_pid is not None:
        exit_with(owner_pid)
    if init_fn is None:
        try:
            first = recv_job(conn)
        except (EOFError, OSError):
            os._exit(0)  # never adopted: the pool was dropped before its session opened
        if first is None:
            os._exit(0)
        init_fn, init_payload = first
    try:
        state = init_fn(index, init_payload)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which re-raises it
        conn.send(("error", pack_exception(exc)))
        return
    del init_payload
    conn.send(("ready", os.getpid()))
    _serve(conn, state)
    # Nothing of a worker outlives it (its results went through the pipe, the tables are the
    # parent's shared memory), so skip the interpreter's teardown: it took ~0.5 s (torch and
    # multiprocessing finalizers) of every run's shutdown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def exit_with(owner_pid: int) -> None:
    """Exit this process (``os._exit``) as soon as process ``owner_pid`` is gone.

    A flow run killed or cancelled mid-bucket (``kill -9`` of a Prefect worker, a
    cancelled run past its grace period) would otherwise leave its workers training on
    until their job ends, holding the shared memory. Neither daemon flags nor
    ``PR_SET_PDEATHSIG`` cover it: under forkserver the parent is the fork server, which
    itself waits for its children. A daemon thread blocks on a pidfd of the owner
    (Linux 5.3+), else polls it once a second.
    """

    def watch() -> None:
        try:
            pidfd = os.pidfd_open(owner_pid)
        except (AttributeError, OSError):
            pidfd = None
        if pidfd is not None:
            select.select([pidfd], [], [])
        else:
            while _alive(owner_pid):
                time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="pbg-owner-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _serve(conn: Connection, state: Any) -> None:
    """Run jobs until the parent sends ``None`` or goes away."""
    while True:
        try:
            message = recv_job(conn)
        except (EOFError, OSError):
            return  # the parent died or closed the pipe: nothing left to serve
        except Exception as exc:  # noqa: BLE001 - e.g. fn's module cannot be imported here: sent to the parent
            conn.send(("error", pack_exception(exc)))
            continue
        if message is None:
            return
        fn, args = message
        try:
            reply: tuple[str, Any] = ("ok", fn(state, args))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which re-raises it
            reply = ("error", pack_exception(exc))
        del message, args
        try:
            conn.send(reply)
        except Exception as exc:  # noqa: BLE001 - e.g. an unpicklable result: sent to the parent
            conn.send(("error", pack_exception(exc)))


def pack_exception(exc: BaseException) -> PackedException:
    """Pickle ``exc`` if it round-trips, with its type name, message and traceback text."""
    text = "".join(traceback.format_exception(exc))
    try:
        pickled = pickle.dumps(exc)
        pickle.loads(pickled)  # some exceptions pickle but cannot be rebuilt (custom __init__)
    except Exception:  # noqa: BLE001 - any failure to rebuild it: send the text only
        return None, type(exc).__qualname__, str(exc), text
    return pickled, type(exc).__qualname__, str(exc), text


def unpack_exception(worker: int, packed: PackedException) -> Exception:
    """The exception to raise in the parent: the child's own if picklable, else RuntimeError.

    Either way the child's traceback text is part of what the user sees.
    """
    blob, type_name, message, text = packed
    exc: Exception | None = None
    if blob is not None:
        try:
            exc = pickle.loads(blob)
        except Exception:  # noqa: BLE001 - not rebuildable here: the text still says what failed
            exc = None
    header = f"traceback in HOGWILD worker {worker}:\n{text}"
    if not isinstance(exc, Exception):
        return RuntimeError(f"HOGWILD worker {worker} raised {type_name}: {message}\n{header}")
    exc.add_note(header)
    return exc


# ---- wire protocol for jobs --------------------------------------------------------------
class PassedFd:
    """Stands for a descriptor sent alongside the job; ``detach()`` in the child returns it."""

    def __init__(self, index: int) -> None:
        self.index = index

    def detach(self) -> int:
        """The received descriptor (the caller owns and closes it)."""
        return _received_fds.pop(self.index)


class _FdCollector:
    """Plays multiprocessing's "spawning popen" while a job is pickled.

    ``multiprocessing.reduction.DupFd`` asks the spawning popen, when there is one,
    to pass a descriptor to the child; this one just lists them for :func:`send_job`.
    """

    def __init__(self) -> None:
        self.fds: list[int] = []

    def duplicate_for_child(self, fd: int) -> int:
        self.fds.append(fd)
        return len(self.fds) - 1

    def DupFd(self, index: int) -> PassedFd:
        return PassedFd(index)


def encode_job(job: Any) -> tuple[bytes, list[int]]:
    """Pickle ``job`` like ``Connection.send`` would, collecting the descriptors it refers to.

    The descriptors stay owned by their storages; the caller keeps ``job`` alive until sent.
    """
    collector = _FdCollector()
    previous = context.get_spawning_popen()
    context.set_spawning_popen(collector)  # type: ignore[arg-type]  # duck-typed: only its duplicate_for_child is called
    try:
        blob = bytes(reduction.ForkingPickler.dumps(job))
    finally:
        context.set_spawning_popen(previous)
    return len(collector.fds).to_bytes(_COUNT_BYTES, "little") + blob, collector.fds


def send_job(conn: Connection, message: bytes, fds: list[int]) -> None:
    """Send an encoded job, then its descriptors on the same socket."""
    conn.send_bytes(message)
    if fds:
        with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            for start in range(0, len(fds), _FDS_PER_MESSAGE):
                reduction.sendfds(sock, fds[start : start + _FDS_PER_MESSAGE])


def recv_job(conn: Connection) -> Any:
    """Receive and unpickle one job sent by :func:`send_job`."""
    message = conn.recv_bytes()
    count = int.from_bytes(message[:_COUNT_BYTES], "little")
    fds: list[int] = []
    if count:
        with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            while len(fds) < count:
                fds += reduction.recvfds(sock, min(_FDS_PER_MESSAGE, count - len(fds)))
    _received_fds.clear()
    _received_fds.update(enumerate(fds))
    try:
        return pickle.loads(memoryview(message)[_COUNT_BYTES:])
    finally:
        for fd in _received_fds.values():  # any not claimed by a rebuilt storage
            os.close(fd)
        _received_fds.clear()
