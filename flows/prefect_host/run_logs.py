"""Engine and storage log lines in the flow run's logs, whatever started the run.

``PREFECT_LOGGING_EXTRA_LOGGERS`` gives these loggers Prefect's API handler only where it was
set before Prefect configured logging (the ``pbg`` CLI and the deployment's job variables
set it), and their level stays at the root's WARNING: the per-bucket INFO lines (swapping,
training, saving, committing) would not reach the UI. :func:`forward_engine_logs`, called at
the start of the flow, makes sure of both.

It also drops Prefect's routine lifecycle lines from the console and the run's logs
(:class:`flows.prefect_host.log_filters.RoutineLifecycleFilter`, where every filter rule is);
``PBG_VERBOSE=1`` (``pbg --verbose``) keeps them.
"""

from __future__ import annotations

import logging

from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging.handlers import APILogHandler

from flows.prefect_host.log_filters import quiet_run_loggers

ENGINE_LOGGERS = ("pbg_core", "storage", "tasks")


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

    Also drops Prefect's routine lifecycle lines from its run loggers unless ``PBG_VERBOSE``
    (:func:`flows.prefect_host.log_filters.quiet_run_loggers`).
    """
    quiet_run_loggers()
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
