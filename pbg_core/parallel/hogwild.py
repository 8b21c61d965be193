"""The HOGWILD workers a session drives: this process as worker 0, the others children.

:class:`HogwildWorkers` runs one share of every job in the coordinating process and the
rest in a :class:`~pbg_core.parallel.pool.WorkerPool` of children, started when a job
first needs them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import torch

from pbg_core.parallel.pool import WorkerPool
from pbg_core.parallel.worker_boot import PrestartedChildren

__all__ = ["HogwildWorkers"]

A = TypeVar("A")
R = TypeVar("R")


def _init_shifted(index: int, payload: tuple[Callable[[int, Any], Any], Any]) -> Any:
    """Child init for :class:`HogwildWorkers`: child ``i`` is HOGWILD worker ``i + 1``."""
    init_fn, init_payload = payload
    return init_fn(index + 1, init_payload)


class HogwildWorkers(Generic[R]):
    """``num_workers`` HOGWILD workers: worker 0 is this process, the others are children.

    The coordinating process would otherwise sit idle while its children train, so it
    trains one share itself (with one torch thread, like the children). That saves a
    whole process (its interpreter, torch and mapped tables: hundreds of MiB) and a
    child start. With ``num_workers == 1`` no child process exists at all.

    The children start on the first :meth:`run` that gives them work (unless ``prestarted``
    ones are adopted at once): a run whose buckets are all too small for more than one
    worker (see :func:`pbg_core.parallel.worker_boot.active_workers`) never starts them.

    Args:
        num_workers: Total workers including this process (>= 1).
        init_fn: Module-level ``init_fn(worker_index, init_payload) -> worker_state``.
        init_payload: Given to ``init_fn`` here and sent once to each child.
        start_method: Start method of the children (see :class:`~pbg_core.parallel.pool.WorkerPool`).
        prestarted: ``num_workers - 1`` children started ahead (:mod:`pbg_core.parallel.worker_boot`)
            to adopt instead of starting new ones.
    """

    def __init__(
        self,
        num_workers: int,
        init_fn: Callable[[int, Any], Any],
        init_payload: Any,
        start_method: str = "spawn",
        prestarted: PrestartedChildren | None = None,
    ) -> None:
        if not isinstance(num_workers, int) or num_workers < 1:
            raise ValueError(f"num_workers must be an int >= 1; got {num_workers!r}")
        self.num_workers = num_workers
        self._init = (init_fn, init_payload)
        self._start_method = start_method
        self._children: WorkerPool[R] | None = None
        if num_workers > 1 and prestarted is not None:
            self._start_children(prestarted)
        self._state = init_fn(0, init_payload)

    @property
    def pids(self) -> list[int]:
        """This process, then the children (none before they are started)."""
        return [os.getpid(), *(self._children.pids if self._children else [])]

    @property
    def closed(self) -> bool:
        """Whether the children were closed (this process's share is always available)."""
        return self._children is not None and self._children.closed

    def run(self, fn: Callable[[Any, A], R], per_worker_args: Sequence[A]) -> list[R]:
        """``fn(state_i, per_worker_args[i])`` for every worker given args; results in worker order.

        Fewer args than workers leave the remaining workers idle (one arg: this process only).
        """
        if not per_worker_args:
            return []
        if len(per_worker_args) > self.num_workers:
            raise ValueError(f"got {len(per_worker_args)} worker args but there are {self.num_workers} workers")

        def local() -> R:
            previous = torch.get_num_threads()
            torch.set_num_threads(1)  # one core per worker, as in the children
            try:
                return fn(self._state, per_worker_args[0])
            finally:
                torch.set_num_threads(previous)

        if len(per_worker_args) == 1:
            return [local()]
        return self._start_children().run_alongside(fn, per_worker_args[1:], local)

    def _start_children(self, prestarted: PrestartedChildren | None = None) -> WorkerPool[R]:
        """The children, started (or adopted) on first use."""
        if self._children is None:
            init_fn, init_payload = self._init
            self._children = WorkerPool(
                self.num_workers - 1,
                _init_shifted,
                (init_fn, init_payload),
                self._start_method,
                prestarted=prestarted,
            )
        return self._children

    def close(self) -> None:
        """Stop the children (idempotent)."""
        if self._children is not None:
            self._children.close()

    def __enter__(self) -> HogwildWorkers[R]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
