"""How a failed ``pbg`` command reports: one line naming what is wrong, a traceback only with ``--debug``.

- :func:`describe` turns an exception into that line: our own errors (:class:`PbgError`)
  already name the file/field, the bad value and what is allowed; an ``OSError`` names its
  file and the OS's reason; anything else is unexpected (a bug), shown by type and message
  with a hint to rerun with ``--debug``.
- :func:`report` prints it on stderr as ``pbg <command>: error: ...`` (plus the traceback
  when debugging) and returns the exit status.
- :func:`quiet_run_failures` keeps Prefect's failure lines of a flow or task run
  ("Encountered exception during execution", "Task run failed with exception",
  "Finished in state Failed(...)", each with a 40-160 line traceback) off the console:
  the command prints its own line instead. Only the console handler is filtered; the
  run's logs in the Prefect API (and the UI) keep the full traceback.

``--debug`` (every subcommand) or ``PBG_DEBUG=1`` turns all of this off.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

from flows.quiet import add_console_filter
from pbg_core.errors import PbgError

DEBUG_VARIABLE = "PBG_DEBUG"
EXIT_FAILED = 1
DEBUG_HINT = "rerun with --debug (or PBG_DEBUG=1) for the traceback"
# Prefect 3.9's lines for a failed run, logged on prefect.flow_runs / prefect.task_runs:
# flow_engine.py logger.exception("Encountered exception during execution: %r"),
# task_engine.py logger.error("Task run failed with exception: ...", exc_info=True), and
# "Finished in state Failed(...)" (INFO for a flow run, ERROR for a task run).
RUN_FAILURE_PREFIXES = (
    "Encountered exception during execution",
    "Task run failed with ",
    "Finished in state Failed(",
)
RETRY_PREFIX = "Task run failed with "  # INFO when a retry follows, ERROR (with the traceback) when none does
PREFECT_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


def debug_enabled(flag: bool = False) -> bool:
    """Whether tracebacks are wanted: ``--debug`` given, or ``PBG_DEBUG`` set to 1/true/yes."""
    return flag or os.environ.get(DEBUG_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def describe(exc: BaseException) -> str:
    """The message a user sees for ``exc``: what is wrong, where, and what is allowed."""
    if isinstance(exc, PbgError):
        return str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        reason = exc.strerror or type(exc).__name__
        target = f" -> {exc.filename2}" if exc.filename2 is not None else ""
        return f"{exc.filename}{target}: {reason}"
    if isinstance(exc, MemoryError):
        return "out of memory; lower batch_size or num_uniform_negs, or use more partitions"
    text = " ".join(str(exc).split())
    return f"unexpected {type(exc).__name__}" + (f": {text}" if text else "") + f" ({DEBUG_HINT})"


def report(command: str, exc: BaseException, debug: bool) -> int:
    """Print ``exc`` for the user on stderr (its traceback first when ``debug``); the exit status."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    print(f"pbg {command}: error: {describe(exc)}", file=sys.stderr)
    return EXIT_FAILED


class RunFailureFilter(logging.Filter):
    """Drops Prefect's failure lines of flow and task runs (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(PREFECT_RUN_LOGGERS):
            return True
        message = str(record.msg)
        if message.startswith(RETRY_PREFIX) and record.levelno < logging.ERROR:
            return True  # "Task run failed with ...: ... - Retry 1/3 will start ...": the user wants to see it
        # Any level: a flow run logs its "Finished in state Failed(...)" at INFO, a task run at ERROR.
        return not message.startswith(RUN_FAILURE_PREFIXES)


def quiet_run_failures() -> None:
    """Install :class:`RunFailureFilter` on Prefect's console handlers (call once Prefect is imported);
    the run's logs in the API keep the failure lines and their tracebacks."""
    add_console_filter(RunFailureFilter, RunFailureFilter)
