"""Start HOGWILD worker processes before the training session exists (no torch import here).

A spawned worker spends about 1.5 s importing torch and the engine before it can train. A
command that knows how many workers it will need (``pbg train`` does, once it has read the
config and imported the engine) starts them ahead with :func:`prestart_children`: forked
while it is still single-threaded, they are ready at once, while the command waits for its API
server. The training session later adopts them (:func:`take_prestarted`) and sends each its
init payload as the first message (see :mod:`pbg_core.parallel.worker`).

This module imports neither torch nor the worker module: the whole point is to start the
children before the parent pays for those imports. Children that are never adopted (the
command failed first) are stopped by :func:`close_prestarted`, or, being daemons, by
multiprocessing when the command exits; they also exit by themselves when it dies.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

START_METHOD = "spawn"  # see pbg_core.session.build: a forkserver would hold ~200 MiB all run long

# HOGWILD workers each start from the same snapshot of the tables; with only a batch or
# two each, their updates are mostly stale steps from one point (Nations, 2 batches per
# epoch: filtered MRR 0.60-0.61 with two overlapping workers, ~0.66 with one), and the
# parallel speed-up of so little work is lost in dispatch anyway.
MIN_BATCHES_PER_WORKER = 8
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def active_workers(num_edges: int, batch_size: int, num_workers: int) -> int:
    """How many workers train a bucket of ``num_edges``: each gets at least
    :data:`MIN_BATCHES_PER_WORKER` batches, and there is always one."""
    return max(1, min(num_workers, num_edges // (MIN_BATCHES_PER_WORKER * batch_size)))


def default_num_workers() -> int:
    """Cores this process may run on (affinity/cgroup cpusets), not the machine's core count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not available on macOS
        return max(1, os.cpu_count() or 1)


@dataclass
class PrestartedChildren:
    """Worker processes started without their init payload: each waits for it on its pipe."""

    processes: list[BaseProcess] = field(default_factory=list)
    connections: list[Connection] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.processes)

    def close(self) -> None:
        """Stop the children and reap them: they hold nothing yet, so SIGTERM at once."""
        for conn in self.connections:
            conn.close()
        for proc in self.processes:
            if proc.is_alive():
                proc.terminate()
        for proc in self.processes:
            proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.processes, self.connections = [], []


_warm: PrestartedChildren | None = None


def boot(index: int, conn: Connection, owner_pid: int) -> None:
    """Child entry point: import the worker module here, then wait for the init payload."""
    # A forked child inherits the command's Python signal handlers (`pbg` turns SIGTERM into
    # KeyboardInterrupt): the pool stops a child with SIGTERM and expects it gone, silently,
    # and Ctrl-C reaching the whole process group is the parent's to handle.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # held since the fork (start_children)
    from pbg_core.parallel.worker import worker_main

    worker_main(index, conn, None, None, owner_pid)


def start_children(count: int, start_method: str = START_METHOD) -> PrestartedChildren:
    """Start ``count`` uninitialised workers (child ``i`` is pool index ``i``); returns at once.

    ``"fork"`` is used only while this process has a single thread (see :func:`prestart_children`).
    """
    if start_method == "fork" and threading.active_count() > 1:
        start_method = START_METHOD  # forking a multi-threaded process can deadlock the child
    ctx = multiprocessing.get_context(start_method)
    children = PrestartedChildren()
    # Held over each fork: until boot() has reset them, a forked child would run the
    # command's own handlers for them. Delivered to this process once it has forked.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        for index in range(count):
            parent_end, child_end = ctx.Pipe(duplex=True)
            process = ctx.Process  # type: ignore[attr-defined]  # every concrete context has one; typeshed's BaseContext does not declare it
            proc = process(target=boot, args=(index, child_end, os.getpid()), name=f"pbg-hogwild-{index}", daemon=True)
            proc.start()
            child_end.close()  # only the child holds its end: the parent sees EOF when it dies
            children.processes.append(proc)
            children.connections.append(parent_end)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return children


def prestart_children(count: int, start_method: str = START_METHOD) -> None:
    """Start ``count`` workers for a session this process is about to open (0: nothing).

    ``start_method="fork"`` once this process has imported torch and the engine, while it has
    no other thread yet (Prefect starts its threads with the first flow run): the children
    are then ready at once, without importing anything. The spawned default costs each child
    ~1.5 s of imports, which overlap the caller's only if started early.
    """
    global _warm
    close_prestarted()
    if count > 0:
        _warm = start_children(count, start_method)


def take_prestarted(count: int) -> PrestartedChildren | None:
    """The pre-started workers if there are exactly ``count``; others are stopped, and None returned."""
    global _warm
    warm, _warm = _warm, None
    if warm is not None and len(warm) != count:
        warm.close()
        return None
    return warm


def close_prestarted() -> None:
    """Stop pre-started workers nobody adopted (idempotent)."""
    global _warm
    if _warm is not None:
        _warm.close()
        _warm = None
