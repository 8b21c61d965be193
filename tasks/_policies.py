"""The kinds of task: every task in ``tasks/`` is made by one of them, never by ``@task`` itself.

A kind is a named set of Prefect task options; a task states only its name and run name::

    @storage_task(name="write-checkpoint", task_run_name="write checkpoint v{iteration.version}")

No task caches (``NO_CACHE``): Prefect's default policy pickles and hashes every argument on
every call, and tasks that take a run or session handle (:mod:`tasks.runs`) name state of this
process, so a result cached on it would be meaningless in any other run. Only *transient*
storage faults are retried (connection resets, timeouts, throttling, 5xx): retrying a format
error or a missing file would only hide it. The kinds:

- :data:`storage_task`: reads or writes the run's stores; a transient fault is retried.
- :data:`plain_task`: runs once (a step on this process's live state, or a whole conversion).
- :data:`unpersisted_task`, :data:`unpersisted_storage_task`: the same, for a task whose result
  holds credentials (a config): it is never written to Prefect's result storage.

A task that needs another set of options gets a new kind here, with its reason;
``tests/tasks/test_policies.py`` fails on a task made any other way.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ParamSpec, Protocol, TypeVar

from prefect import Task, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import MissingContextError

P = ParamSpec("P")
R = TypeVar("R")

TRANSIENT_ERRNOS = frozenset(
    {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EAGAIN, errno.EPIPE}
)
STORAGE_RETRIES = 3
STORAGE_RETRY_DELAYS = [1.0, 4.0, 10.0]

__all__ = [
    "KINDS",
    "NO_CACHE",
    "STORAGE_RETRIES",
    "STORAGE_RETRY_DELAYS",
    "TaskKind",
    "is_transient",
    "plain_task",
    "retry_if_transient",
    "run_logger",
    "storage_task",
    "unpersisted_storage_task",
    "unpersisted_task",
]


def is_transient(exc: BaseException) -> bool:
    """True for faults worth retrying: marked transient, timeouts, connection errors."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        marked = getattr(current, "transient", None)
        if marked is not None:  # the error says so itself (StorageUnreachable says no)
            return bool(marked)
        if isinstance(current, (TimeoutError, ConnectionError)):
            return True
        if isinstance(current, OSError) and current.errno in TRANSIENT_ERRNOS:
            return True
        current = current.__cause__ or current.__context__
    return False


def retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry only when the failure is transient."""
    exc = state.data if isinstance(state.data, BaseException) else None
    if exc is None:
        try:
            state.result(raise_on_failure=True)
        except BaseException as raised:  # noqa: BLE001 - we only classify it
            exc = raised
    return exc is not None and is_transient(exc)


class _MakeTask(Protocol):
    """What a kind returns: the decorator turning a function into a task of that kind."""

    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


@dataclass(frozen=True)
class TaskKind:
    """A named set of Prefect task options; ``@kind(name=..., task_run_name=...)`` makes a task with them.

    Attributes:
        kind: The kind's name (its name in this module).
        options: The ``@task`` keyword arguments every task of this kind gets.
    """

    kind: str
    options: Mapping[str, Any]

    def __call__(self, *, name: str, task_run_name: str) -> _MakeTask:
        """The decorator of a task named ``name`` whose runs are named ``task_run_name`` (a format string)."""
        make: _MakeTask = task(name=name, task_run_name=task_run_name, **self.options)
        return make


def _kind(kind: str, **options: Any) -> TaskKind:
    return TaskKind(kind, MappingProxyType({"cache_policy": NO_CACHE, **options}))


_RETRIED = {
    "retries": STORAGE_RETRIES,
    "retry_delay_seconds": STORAGE_RETRY_DELAYS,
    "retry_condition_fn": retry_if_transient,
}

# Reads or writes the run's stores (checkpoint, edge and entity files, leases, run directories):
# a transient storage fault (is_transient) is retried after 1, 4 and 10 s; any other fails at once.
# Its body must be safe to run again after a fault part-way (the checkpoint protocol's steps are).
storage_task = _kind("storage_task", **_RETRIED)

# Runs once, a failure fails it: a step on this process's live state (train a bucket, rank the
# held-out edges, close a session, judge a gate), where no storage fault is involved, or a whole
# conversion (import-edges, export-*), which runs again only as a new flow run.
plain_task = _kind("plain_task")

# plain_task whose result holds credentials (a resolved config keeps them as SecretStr, and a
# pickled config would hold them in clear): never written to Prefect's result storage, even
# where PREFECT_RESULTS_PERSIST_BY_DEFAULT is on.
unpersisted_task = _kind("unpersisted_task", persist_result=False)

# storage_task whose result must never be written to Prefect's result storage (as unpersisted_task).
unpersisted_storage_task = _kind("unpersisted_storage_task", persist_result=False, **_RETRIED)

KINDS: tuple[TaskKind, ...] = (storage_task, plain_task, unpersisted_task, unpersisted_storage_task)


def run_logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    """The Prefect run logger inside a flow/task run, else this package's logger.

    Lets task bodies run through ``.fn()`` (tests, benchmarks) without a run context.
    """
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("tasks")
