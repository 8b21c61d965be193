"""Engine and storage log lines in the flow run's logs, whatever started the run.

``PREFECT_LOGGING_EXTRA_LOGGERS`` gives these loggers Prefect's API handler only where it was
set before Prefect configured logging (the ``pbg`` CLI and the deployment's job variables
set it), and their level stays at the root's WARNING: the per-bucket INFO lines (swapping,
training, saving, committing) would not reach the UI. :func:`forward_engine_logs`, called at
the start of the flow, makes sure of both.

It also drops Prefect's routine lifecycle lines (``Finished in state Completed()`` for every
task and subflow, ``Beginning subflow run``, ``Created task run``) from the console and the
run's logs: the UI shows those states anyway, and at a dozen per iteration they cost a tenth
of a local run's time (formatting, shipping, storing). Failures and everything our own code
logs stay. ``PBG_VERBOSE=1`` (``pbg --verbose``) keeps them all.
"""

from __future__ import annotations

import logging
import os

from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging.handlers import APILogHandler

ENGINE_LOGGERS = ("pbg_core", "storage", "tasks")
PREFECT_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
ROUTINE_PREFIXES = ("Finished in state Completed(", "Beginning subflow run", "Created task run")


class RoutineLifecycleFilter(logging.Filter):
    """Drops Prefect's INFO lines that only restate a run's state (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno != logging.INFO or not str(record.msg).startswith(ROUTINE_PREFIXES)


class InRunLogHandler(APILogHandler):
    """Prefect's API handler, silent outside a flow or task run.

    The same loggers also log from background threads (staged uploads, lease renewal) and
    from task bodies called through ``.fn()``; there the plain handler warns on every record.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if (
            getattr(record, "flow_run_id", None) is None
            and FlowRunContext.get() is None
            and TaskRunContext.get() is None
        ):
            return
        super().emit(record)


def forward_engine_logs() -> None:
    """Set the engine's loggers to INFO (unless set lower) and give them Prefect's API handler.

    Also installs :class:`RoutineLifecycleFilter` on Prefect's run loggers unless ``PBG_VERBOSE``.
    """
    if os.environ.get("PBG_VERBOSE", "") in ("", "0"):
        for name in PREFECT_RUN_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, RoutineLifecycleFilter) for f in logger.filters):
                logger.addFilter(RoutineLifecycleFilter())
    for name in ENGINE_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)
        if not _has_api_handler(logger):
            logger.addHandler(InRunLogHandler())


def _has_api_handler(logger: logging.Logger) -> bool:
    """Whether ``logger`` or an ancestor up to the first non-propagating one sends to the API."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(isinstance(handler, APILogHandler) for handler in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False
