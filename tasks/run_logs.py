"""Engine and storage log lines in the flow run's logs, whatever started the run.

``PREFECT_LOGGING_EXTRA_LOGGERS`` gives these loggers Prefect's API handler only where it was
set before Prefect configured logging (the ``pbg`` CLI and the deployment's job variables
set it), and their level stays at the root's WARNING: the per-bucket INFO lines (swapping,
training, saving, committing) would not reach the UI. :func:`forward_engine_logs`, called at
the start of the flow, makes sure of both.
"""

from __future__ import annotations

import logging

from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging.handlers import APILogHandler

ENGINE_LOGGERS = ("pbg_core", "storage", "tasks")


class InRunLogHandler(APILogHandler):
    """Prefect's API handler, silent outside a flow or task run.

    The same loggers also log from background threads (staged uploads, lease renewal) and
    from task bodies called through ``.fn()``; there the plain handler warns on every record.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "flow_run_id", None) is None and FlowRunContext.get() is None \
                and TaskRunContext.get() is None:
            return
        super().emit(record)


def forward_engine_logs() -> None:
    """Set the engine's loggers to INFO (unless set lower) and give them Prefect's API handler."""
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
