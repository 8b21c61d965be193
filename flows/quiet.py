"""What a ``pbg`` command prints on the terminal: our lines, Prefect's own only with ``--verbose``.

Prefect's console handler prints every INFO line its engine logs about itself: "Beginning
flow run ...", "Finished in state Completed()", "Created task run ...", "View at ...",
several per iteration. The flow's state is what the command's own summary says, so
:class:`PrefectChatter` drops them from the terminal; the run's logs in the API keep what
:mod:`tasks.run_logs` lets through. It also drops, from the terminal only:

- the crash report Prefect writes for the task an interrupt landed in ("Crash detected!
  Execution was aborted by an interrupt signal", then "Finished in state Crashed(...)"):
  the command itself says what was interrupted and how to resume (:mod:`flows.interrupts`);
- "Still processing items: N items remaining..." of Prefect's client queues while they
  are drained at the end (a progress note, not a problem);
- Dask's INFO lines (a local cluster's scheduler and workers starting and stopping) when
  ``num_machines > 1``; its warnings stay.

Of our own lines it drops the engine's step-by-step ones (marked ``pbg_step``: swapping
partitions, training N edges, saving, writing, committing, removing versions; several per
iteration), which the run's logs in the API keep.

What stays: warnings and errors (Prefect's included, other than those above), and every other
line our own code logs, through Prefect's run loggers or not: per bucket the "trained" summary
and the held-out stats, the lease, the final "checkpoint ... is at version N". ``--verbose``
(``PBG_VERBOSE=1``) keeps all.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

VERBOSE_VARIABLE = "PBG_VERBOSE"
INTERRUPT_CRASH_PHRASES = (
    "Execution was aborted by an interrupt signal",
    "Execution was aborted by a termination signal",
)
DRAIN_NOTE = "Still processing items:"


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
    if os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0"):
        return
    import prefect

    prefect_dir = str(Path(prefect.__file__).parent)
    add_console_filter(PrefectChatter, lambda: PrefectChatter(prefect_dir))


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
