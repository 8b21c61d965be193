"""Retry and caching policy shared by every task.

Only *transient* storage faults are retried (connection resets, timeouts,
throttling, 5xx): retrying a format error or a missing file would only hide it.
Tasks that touch the live training state never hash their inputs
(``NO_CACHE``): Prefect's default policy pickles and hashes every argument on
every call. Tasks that take a run or session handle (:mod:`tasks.runs`) keep
``NO_CACHE`` too: the handle names state of this process, so a result cached on
it would be meaningless in any other run.
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from prefect import get_run_logger
from prefect.cache_policies import NO_CACHE
from prefect.exceptions import MissingContextError

TRANSIENT_ERRNOS = frozenset(
    {errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EAGAIN, errno.EPIPE}
)
STORAGE_RETRIES = 3
STORAGE_RETRY_DELAYS = [1.0, 4.0, 10.0]

__all__ = ["NO_CACHE", "STORAGE_RETRIES", "STORAGE_RETRY_DELAYS", "is_transient", "retry_if_transient", "run_logger"]


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


def run_logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    """The Prefect run logger inside a flow/task run, else this package's logger.

    Lets task bodies run through ``.fn()`` (tests, benchmarks) without a run context.
    """
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("tasks")
