"""Which log lines show where: every rule by which ``pbg`` drops a line, from the terminal or a run's logs.

Prefect logs a great deal about itself; the flow's state is what the command's own summary
says, and the UI shows every run's state anyway. The rules, by where they apply:

**A run's logs and the terminal** (filters on Prefect's run loggers, installed at the start of
every flow, deployed or not, by :func:`flows.prefect_host.run_logs.forward_engine_logs`):
:class:`RoutineLifecycleFilter` drops the INFO lines that only restate a run's state
("Finished in state Completed()" for every task and subflow, "Beginning subflow run",
"Created task run"): at a dozen per iteration they cost a tenth of a local run's time
(formatting, shipping, storing). Failures and everything our own code logs stay. :class:`VerdictFilter` drops Prefect's
failure lines of a run that ended in an expected verdict (:mod:`tasks.verdicts`: a failed
quality gate, no new data): "Task run failed with state" (with a traceback of nothing,
"NoneType: None") and, in a deployed run, "Engine execution exited with unexpected exception"
(with the traceback of the ``FailedRun`` Prefect raises for the returned Failed state). The
run's logs keep our one line and Prefect's "Finished in state Failed('...')". It stays on
with ``--verbose``: the lines would show a crash where there is none.

**The terminal only** (filters on Prefect's console handlers, installed by the ``pbg``
command line; the run's logs in the API keep these lines):

- :class:`PrefectChatter` (:func:`quiet_console`): every other INFO line Prefect's own files log
  ("Beginning flow run ...", "View at ...", ...); the crash report Prefect writes for the task an
  interrupt landed in ("Crash detected! Execution was aborted by an interrupt signal", then
  "Finished in state Crashed(...)"), since the command itself says what was interrupted and how
  to resume (:mod:`flows.prefect_host.interrupts`); "Still processing items: N items
  remaining..." of Prefect's client queues drained at the end; Dask's INFO lines (a local
  cluster's scheduler and workers starting and stopping; its warnings stay); and the engine's
  step-by-step lines (marked ``pbg_step``: swapping partitions, training N edges, saving,
  writing, committing, removing versions).
- :class:`RunFailureFilter` (:func:`quiet_run_failures`): Prefect's failure lines of a flow or
  task run ("Encountered exception during execution", "Task run failed with exception",
  "Finished in state Failed(...)", each with a 40-160 line traceback); the command prints its
  own line instead (:mod:`flows.cli.user_errors`).
- With ``--debug``, :class:`NoRunFailureTraceback` (:func:`one_traceback_on_console`) keeps those
  failure lines but without Prefect's copy of the traceback: the one traceback is the command's.

**While runs go to the embedded server** (:func:`no_run_urls`): "View at <url>" of a flow run,
which would name a page of a server that serves no UI and is gone at the end.

What stays: warnings and errors (Prefect's included, other than those above), and every other
line our own code logs, through Prefect's run loggers or not: per bucket the "trained" summary
and the held-out stats, the lease, the final "checkpoint ... is at version N". ``--verbose``
(``PBG_VERBOSE=1``) keeps all but the failure lines, which ``--debug`` keeps.

Prefect is imported only inside the functions that need it: the command line imports this
module before it knows whether the command runs a flow at all (``pbg import`` and ``export``
load no Prefect).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

VERBOSE_VARIABLE = "PBG_VERBOSE"
PREFECT_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")
FLOW_RUN_LOGGER = "prefect.flow_runs"
# Prefect 3.9's INFO lines that restate a run's state.
ROUTINE_PREFIXES = ("Finished in state Completed(", "Beginning subflow run", "Created task run")
INTERRUPT_CRASH_PHRASES = (
    "Execution was aborted by an interrupt signal",
    "Execution was aborted by a termination signal",
)
DRAIN_NOTE = "Still processing items:"
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
RUN_URL_PREFIX = "View at "
# Prefect 3.9's failure lines that a verdict's Failed state still brings (task_engine.py handle_retry;
# flow_engine.py run_flow's error_logger in a deployed run; the flow engine's handle_exception).
VERDICT_NOISE_PREFIXES = (
    "Task run failed with state",
    "Engine execution exited with unexpected exception",
    "Encountered exception during execution",
)


def verbose() -> bool:
    """Whether Prefect's own lines are wanted: ``--verbose``, or ``PBG_VERBOSE`` set to anything but 0."""
    return os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0")


class RoutineLifecycleFilter(logging.Filter):
    """Drops Prefect's INFO lines that only restate a run's state (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno != logging.INFO or not str(record.msg).startswith(ROUTINE_PREFIXES)


class VerdictFilter(logging.Filter):
    """Drops Prefect's failure lines of a run that ended in a verdict (see the module docstring).

    A task run's record carries its ``task_run_id`` (and its flow's ``flow_run_id``); a flow
    run's only the ``flow_run_id``: the run a line is about is the task's when there is one.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(VERDICT_NOISE_PREFIXES):
            return True
        from tasks.verdicts import is_verdict_run

        run_id = getattr(record, "task_run_id", None) or getattr(record, "flow_run_id", None)
        return run_id is None or not is_verdict_run(run_id)


def quiet_run_loggers() -> None:
    """Put :class:`VerdictFilter` on Prefect's run loggers and, unless ``PBG_VERBOSE``,
    :class:`RoutineLifecycleFilter` (idempotent)."""
    kinds: list[type[logging.Filter]] = [VerdictFilter] if verbose() else [VerdictFilter, RoutineLifecycleFilter]
    for name in PREFECT_RUN_LOGGERS:
        logger = logging.getLogger(name)
        for kind in kinds:
            if not any(isinstance(f, kind) for f in logger.filters):
                logger.addFilter(kind())


class PrefectChatter(logging.Filter):
    """Drops Prefect's own routine lines (see the module docstring); keeps everything else."""

    def __init__(self, prefect_dir: str) -> None:
        super().__init__()
        self.prefect_dir = prefect_dir.rstrip(os.sep) + os.sep

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "pbg_step", False):
            return False
        if record.name.startswith(("distributed", "dask")):  # a local Dask cluster's start and stop
            return record.levelno > logging.INFO
        if not record.name.startswith("prefect"):
            return True
        message = str(record.msg)
        if any(phrase in message for phrase in INTERRUPT_CRASH_PHRASES) or message.startswith(DRAIN_NOTE):
            return False
        # Our code logs through Prefect's run loggers too: what Prefect's own files log is Prefect's.
        return record.levelno > logging.INFO or not record.pathname.startswith(self.prefect_dir)


def quiet_console() -> None:
    """Put :class:`PrefectChatter` on Prefect's console handlers, unless ``PBG_VERBOSE`` (idempotent).

    Call it once Prefect is imported (importing it configures its logging).
    """
    if verbose():
        return
    import prefect

    prefect_dir = str(Path(prefect.__file__).parent)
    add_console_filter(PrefectChatter, lambda: PrefectChatter(prefect_dir))


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
    the command, whose :func:`flows.cli.user_errors.report` prints the same traceback again: two
    of one error. The run's logs in the API keep Prefect's. Call it once Prefect is imported.
    """
    for handler in console_handlers():
        if not isinstance(handler.formatter, NoRunFailureTraceback):
            handler.setFormatter(NoRunFailureTraceback(handler.formatter))


class RunUrlFilter(logging.Filter):
    """Drops Prefect's "View at <url>" line of a flow run."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(RUN_URL_PREFIX)


@contextlib.contextmanager
def no_run_urls() -> Iterator[None]:
    """Without "View at <url>" of a flow run (console and the run's logs) inside the block.

    For runs on the embedded server, whose pages would be gone at the end (and it serves no UI).
    """
    run_urls = logging.getLogger(FLOW_RUN_LOGGER)
    no_urls = RunUrlFilter()
    run_urls.addFilter(no_urls)
    try:
        yield
    finally:
        run_urls.removeFilter(no_urls)


def add_console_filter(kind: type[logging.Filter], make: Callable[[], logging.Filter]) -> None:
    """Put ``make()`` on every Prefect console handler that has no ``kind`` filter yet.

    Prefect's console handler sits on the root logger (and on a few non-propagating loggers of
    its own); its API handler is elsewhere, so what the run's logs receive is untouched.
    Call it once Prefect is imported (importing it configures its logging).
    """
    for handler in console_handlers():
        if not any(isinstance(f, kind) for f in handler.filters):
            handler.addFilter(make())


def console_handlers() -> list[logging.Handler]:
    """Prefect's console handlers: on the root logger and on a few non-propagating loggers of its own.

    Call it once Prefect is imported (importing it configures its logging).
    """
    from prefect.logging.handlers import PrefectConsoleHandler

    return [
        handler
        for logger in (logging.getLogger(), *_configured_loggers())
        for handler in logger.handlers
        if isinstance(handler, PrefectConsoleHandler)
    ]


def _configured_loggers() -> list[logging.Logger]:
    """Every logger created so far (Prefect gives a few non-propagating ones their own console handler)."""
    return [logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)]
