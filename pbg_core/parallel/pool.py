"""A pool of child processes, started once per run and reused for every bucket.

:class:`WorkerPool` runs ``fn(worker_state, args)`` in each child and returns the
results in worker order. Design choices:

- **Start method.** ``forkserver`` (default) or ``spawn``, never ``fork``: forking a
  process that runs Prefect's threads can deadlock or kill the children. The
  forkserver preloads torch and the worker module, so children fork from a warm
  process (tens of ms per pool after the first) instead of importing torch each
  (seconds per child under ``spawn``).
- **Transport.** One duplex pipe per worker. Jobs pickle with multiprocessing's
  ``ForkingPickler``, which ``torch.multiprocessing`` extends: tensors travel as
  shared memory (a tensor not yet shared is moved to shared memory in place), so a
  child's in-place write is visible in the parent. Their descriptors ride on the
  same socket (see :mod:`pbg_core.parallel.worker`), so a call costs well under a
  millisecond plus microseconds per tensor. No queues: they add a feeder thread
  per call and semaphores that can leak.
- **Failure.** The parent waits on the pipes *and* the process sentinels with
  :func:`multiprocessing.connection.wait`, so a child that dies (``os._exit``,
  SIGKILL, segfault, OOM killer) raises :class:`~pbg_core.errors.WorkerDiedError`
  at once instead of hanging; the pool is then closed. An exception raised by
  ``fn`` is re-raised in the parent with the child's traceback, and the pool stays
  usable.

``init_fn`` and every ``fn`` must be module-level functions of an importable
module (they are pickled by reference). Entry scripts need the usual
``if __name__ == "__main__":`` guard, as with any non-fork start method.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

import torch.multiprocessing as mp

from pbg_core.errors import WorkerDiedError
from pbg_core.parallel.worker import encode_job, send_job, unpack_exception, worker_main
from pbg_core.parallel.worker_boot import PrestartedChildren

__all__ = ["WorkerPool"]

A = TypeVar("A")
R = TypeVar("R")

START_METHODS = ("forkserver", "spawn")
_PRELOAD = ["torch", "pbg_core.parallel.worker"]
_CLOSE_GRACE_SECONDS = 2.0


class WorkerPool(Generic[R]):
    """A fixed set of HOGWILD worker processes; also a context manager that closes them.

    Constructing the pool starts the children and waits until each has run
    ``init_fn(worker_index, init_payload)`` (its return value is that worker's
    state), so a failing ``init_fn`` raises here.

    Args:
        num_workers: Number of processes (>= 1); see :func:`~pbg_core.parallel.worker_boot.default_num_workers`.
        init_fn: Module-level ``init_fn(worker_index, init_payload) -> worker_state``.
        init_payload: Sent to every child once (e.g. shared embedding buffers).
        start_method: ``"forkserver"`` or ``"spawn"``.
        prestarted: ``num_workers`` children already started without a payload (see
            :mod:`pbg_core.parallel.worker_boot`): adopted, and sent ``init_fn``/``init_payload``.

    Raises:
        ValueError: bad ``num_workers`` or ``start_method``.
        WorkerDiedError: a child died during start.
        Exception: whatever ``init_fn`` raised in a child (with its traceback).
    """

    def __init__(
        self,
        num_workers: int,
        init_fn: Callable[[int, Any], Any],
        init_payload: Any = None,
        start_method: str = "forkserver",
        prestarted: PrestartedChildren | None = None,
    ) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1; got {num_workers!r}")
        if prestarted is not None and len(prestarted) != num_workers:
            raise ValueError(f"got {len(prestarted)} pre-started workers for a pool of {num_workers}")
        if start_method not in START_METHODS:
            raise ValueError(f"start_method {start_method!r} is not allowed; allowed: {', '.join(START_METHODS)}")
        self.num_workers = num_workers
        self._procs: list[BaseProcess] = []
        self._conns: list[Connection] = []
        self._closed = False
        self.pids: list[int] = []
        try:
            if prestarted is not None:
                self._adopt(prestarted, init_fn, init_payload)
            else:
                self._start(init_fn, init_payload, start_method)
        except BaseException:
            self.close()
            raise

    # ---- public ---------------------------------------------------------------------------
    def run(self, fn: Callable[[Any, A], R], per_worker_args: Sequence[A]) -> list[R]:
        """Run ``fn(worker_state, per_worker_args[i])`` in worker ``i``, in parallel.

        Fewer args than workers is allowed: the remaining workers idle.

        Returns:
            The results, in worker order.

        Raises:
            ValueError: more args than workers.
            TypeError: ``fn`` or an args value cannot be pickled (nothing was sent).
            RuntimeError: the pool is closed.
            WorkerDiedError: a child died (the pool is closed).
            Exception: the first (lowest worker index) exception raised by ``fn`` in a child,
                re-raised after every worker finished; the pool stays usable.
        """
        if self._closed:
            raise RuntimeError("the worker pool is closed; create a new WorkerPool")
        if len(per_worker_args) > self.num_workers:
            raise ValueError(f"got {len(per_worker_args)} worker args but the pool has {self.num_workers} workers")
        return self.run_alongside(fn, per_worker_args, None)

    def run_alongside(
        self, fn: Callable[[Any, A], R], per_worker_args: Sequence[A], local: Callable[[], R] | None
    ) -> list[R]:
        """Like :meth:`run`, and while the children work, call ``local()`` in this process.

        Returns the children's results (in worker order), preceded by ``local()``'s
        result when ``local`` is given. If ``local`` raises, the children's replies
        are still collected (the pipes stay in sync) before the exception propagates.
        """
        what = getattr(fn, "__qualname__", repr(fn))
        # Pickle every job before sending any, so an unpicklable job leaves the pool usable.
        messages = [_pickle_job(fn, args, what) for args in per_worker_args]
        workers = list(range(len(messages)))
        local_result: list[R] = []
        local_error: BaseException | None = None
        try:
            for worker, message in zip(workers, messages, strict=True):
                self._send(worker, message, what)
            if local is not None:
                try:
                    local_result.append(local())
                except Exception as exc:  # noqa: BLE001 - re-raised once the children are collected
                    local_error = exc
            replies = self._collect(workers, what)
        except BaseException:
            # Interrupted or a child died: the pipes may hold stale replies, so never reuse;
            # the children's work is moot, so do not wait for them.
            self._shutdown(grace_seconds=0.0)
            raise
        if local_error is not None:
            raise local_error
        errors = [(w, payload) for w, (kind, payload) in sorted(replies.items()) if kind == "error"]
        if errors:
            raise unpack_exception(*errors[0])
        return local_result + [replies[w][1] for w in workers]

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (explicitly or after a worker died)."""
        return self._closed

    def close(self) -> None:
        """Stop every child: ask politely, then terminate, then kill; reap them all. Idempotent."""
        self._shutdown(_CLOSE_GRACE_SECONDS)

    def __enter__(self) -> WorkerPool[R]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Best effort for pools dropped without close(); children are daemons anyway.
        if not getattr(self, "_closed", True) and hasattr(self, "_conns"):
            self.close()

    # ---- internals ------------------------------------------------------------------------
    def _start(self, init_fn: Callable[[int, Any], Any], init_payload: Any, start_method: str) -> None:
        ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            ctx.set_forkserver_preload(_PRELOAD)  # only takes effect when the server starts
        for index in range(self.num_workers):
            parent_end, child_end = ctx.Pipe(duplex=True)
            proc = ctx.Process(  # type: ignore[attr-defined]  # typeshed declares Process on the concrete contexts only
                target=worker_main,
                args=(index, child_end, init_fn, init_payload, os.getpid()),
                name=f"pbg-hogwild-{index}",
                daemon=True,  # never outlive the parent, even if close() is skipped
            )
            self._conns.append(parent_end)
            self._procs.append(proc)
            proc.start()
            # Only the child may hold its end, so the parent sees EOF when the child dies.
            child_end.close()
        self._await_ready()

    def _adopt(self, prestarted: PrestartedChildren, init_fn: Callable[[int, Any], Any], init_payload: Any) -> None:
        """Take over children started without a payload and send each ``(init_fn, init_payload)``."""
        self._procs, self._conns = prestarted.processes, prestarted.connections
        prestarted.processes, prestarted.connections = [], []
        message = _pickle_job(init_fn, init_payload, "init_fn")
        for worker in range(self.num_workers):
            self._send(worker, message, "init_fn")
        self._await_ready()

    def _await_ready(self) -> None:
        replies = self._collect(list(range(self.num_workers)), "init_fn")
        for worker, (kind, payload) in sorted(replies.items()):
            if kind == "error":
                raise unpack_exception(worker, payload)
            self.pids.append(payload)

    def _shutdown(self, grace_seconds: float) -> None:
        """Ask each child to exit, wait up to ``grace_seconds`` in all, then terminate/kill and reap."""
        if self._closed:
            return
        self._closed = True
        stop = encode_job(None)
        for conn in self._conns:
            try:
                send_job(conn, *stop)
            except (OSError, ValueError):
                pass  # that child is already gone
        # A failed start can leave processes that were never started: nothing to reap.
        self._procs = [proc for proc in self._procs if proc.pid is not None]
        for proc in self._procs:
            proc.join(grace_seconds / max(1, len(self._procs)))
            if proc.is_alive():
                proc.terminate()
                proc.join(1.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        for proc in self._procs:
            proc.close()

    def _send(self, worker: int, message: tuple[bytes, list[int]], what: str) -> None:
        try:
            send_job(self._conns[worker], *message)
        except (BrokenPipeError, ConnectionResetError):
            self._raise_died(worker, what)

    def _collect(self, workers: list[int], what: str) -> dict[int, tuple[str, Any]]:
        """One reply per worker; raises WorkerDiedError as soon as one of them dies."""
        pending = set(workers)
        replies: dict[int, tuple[str, Any]] = {}
        while pending:
            waitables = [self._conns[w] for w in pending] + [self._procs[w].sentinel for w in pending]
            ready = set(wait(waitables))
            for worker in sorted(pending):
                conn = self._conns[worker]
                # A reply already in the pipe wins over the exit that may follow it.
                if conn in ready or self._procs[worker].sentinel in ready:
                    if not conn.poll():
                        self._raise_died(worker, what)
                    try:
                        replies[worker] = conn.recv()
                    except (EOFError, OSError):
                        self._raise_died(worker, what)
                    pending.discard(worker)
        return replies

    def _raise_died(self, worker: int, what: str) -> None:
        proc = self._procs[worker]
        proc.join(1.0)  # the sentinel fired or the pipe broke: the exit code is (nearly) there
        code = proc.exitcode
        pid = proc.pid
        # The other workers' results are moot now: terminate them without waiting.
        self._shutdown(grace_seconds=0.0)
        raise WorkerDiedError(
            f"HOGWILD worker {worker} (pid {pid}) died with exit code {code}{_describe_exit(code)} "
            f"while running {what}; the worker pool is closed (out of memory, a full /dev/shm "
            "or a crash in native code are the usual causes)"
        )


def _pickle_job(fn: Callable[[Any, Any], Any], args: Any, what: str) -> tuple[bytes, list[int]]:
    """The wire form of one job and the shared-memory descriptors it carries."""
    try:
        return encode_job((fn, args))
    except Exception as exc:
        raise TypeError(
            f"cannot send job {what} to the HOGWILD workers: {exc}; fn must be a module-level "
            "function of an importable module and its args picklable"
        ) from exc


def _describe_exit(code: int | None) -> str:
    """`` (killed by SIGKILL)`` for negative exit codes, else empty."""
    if code is None or code >= 0:
        return ""
    try:
        return f" (killed by {signal.Signals(-code).name})"
    except ValueError:
        return f" (killed by signal {-code})"
