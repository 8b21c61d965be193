"""How a failed ``pbg`` command reports: one line naming what is wrong, a traceback only with ``--debug``.

- :func:`describe` turns an exception into that line: our own errors (:class:`PbgError`)
  already name the file/field, the bad value and what is allowed; a full disk that no write
  site named is said to be one (no OS or HDF5 text); an ``OSError`` names its file and the OS's
  reason; anything else is unexpected (a bug), shown by type and message with a hint to rerun
  with ``--debug``.
- :func:`report` prints it on stderr as ``pbg <command>: error: ...`` (plus the traceback
  when debugging) and returns the exit status.
- :func:`quiet_run_failures` keeps Prefect's failure lines of a flow or task run
  ("Encountered exception during execution", "Task run failed with exception",
  "Finished in state Failed(...)", each with a 40-160 line traceback) off the console:
  the command prints its own line instead. Only the console handler is filtered; the
  run's logs in the Prefect API (and the UI) keep the full traceback.

``--debug`` (every subcommand) or ``PBG_DEBUG=1`` keeps those lines and prints the traceback,
once: :func:`one_traceback_on_console` keeps Prefect's copy of it off the console (the
failure lines stay), so the one traceback is :func:`report`'s, of the exception the command
ended with, its cause chain included, right above the error line.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback

from flows.quiet import add_console_filter, console_handlers
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
    full_disk = _full_disk(exc)
    if full_disk is not None:
        return full_disk
    if isinstance(exc, OSError) and exc.filename is not None:
        reason = exc.strerror or type(exc).__name__
        target = f" -> {exc.filename2}" if exc.filename2 is not None else ""
        return f"{exc.filename}{target}: {reason}"
    if isinstance(exc, MemoryError):
        return "out of memory; lower batch_size or num_uniform_negs, or use more partitions"
    text = " ".join(str(exc).split())
    return f"unexpected {type(exc).__name__}" + (f": {text}" if text else "") + f" ({DEBUG_HINT})"


def _full_disk(exc: BaseException) -> str | None:
    """A full disk or quota (ENOSPC, EDQUOT; also inside HDF5's messages) that no write site named, or None.

    The writes that know their output (a checkpoint, an export) name it with the bytes needed and
    free (:mod:`storage.disk_space`); this is the line for any other, without the OS's or HDF5's text.
    """
    from storage.disk_space import is_out_of_space

    if not is_out_of_space(exc):
        return None
    where = exc.filename if isinstance(exc, OSError) and exc.filename is not None else None
    if where is not None:
        return f"{where}: the disk is full (or your quota is used up); free some space and rerun"
    return f"a disk is full (or your quota is used up); free some space and rerun ({DEBUG_HINT}: it shows which file)"


def report(command: str, exc: BaseException, debug: bool) -> int:
    """Print ``exc`` for the user on stderr (its traceback first when ``debug``); the exit status."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    print(f"pbg {command}: error: {describe(exc)}", file=sys.stderr)
    return EXIT_FAILED


def is_run_failure(record: logging.LogRecord) -> bool:
    """Whether ``record`` is one of Prefect's failure lines of a flow or task run (see the module docstring)."""
    if not record.name.startswith(PREFECT_RUN_LOGGERS):
        return False
    message = str(record.msg)
    if message.startswith(RETRY_PREFIX) and record.levelno < logging.ERROR:
        return False  # "Task run failed with ...: ... - Retry 1/3 will start ...": the user wants to see it
    # Any level: a flow run logs its "Finished in state Failed(...)" at INFO, a task run at ERROR.
    return message.startswith(RUN_FAILURE_PREFIXES)


class RunFailureFilter(logging.Filter):
    """Drops Prefect's failure lines of flow and task runs (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not is_run_failure(record)


class NoRunFailureTraceback(logging.Formatter):
    """``inner``'s format, but Prefect's failure lines of runs without their traceback.

    The record is shared with the other handlers (the API's keeps the traceback): its
    ``exc_info`` is hidden only while this handler formats it, under the handler's lock.
    """

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info is None or not is_run_failure(record):
            return self.inner.format(record)
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text = saved


def quiet_run_failures() -> None:
    """Install :class:`RunFailureFilter` on Prefect's console handlers (call once Prefect is imported);
    the run's logs in the API keep the failure lines and their tracebacks."""
    add_console_filter(RunFailureFilter, RunFailureFilter)


def one_traceback_on_console() -> None:
    """With ``--debug``: Prefect's failure lines on the console without their traceback (idempotent).

    Prefect logs the exception a run failed with, traceback included, and then re-raises it to
    the command, whose :func:`report` prints the same traceback again: two of one error. The
    run's logs in the API keep Prefect's. Call it once Prefect is imported.
    """
    for handler in console_handlers():
        if not isinstance(handler.formatter, NoRunFailureTraceback):
            handler.setFormatter(NoRunFailureTraceback(handler.formatter))
