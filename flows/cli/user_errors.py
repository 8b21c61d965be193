"""How a failed ``pbg`` command reports: one line naming what is wrong, a traceback only with ``--debug``.

- :func:`describe` turns an exception into that line: our own errors (:class:`PbgError`)
  already name the file/field, the bad value and what is allowed; a full disk that no write
  site named is said to be one (no OS or HDF5 text); an ``OSError`` names its file and the OS's
  reason; anything else is unexpected (a bug), shown by type and message with a hint to rerun
  with ``--debug``.
- :func:`report` prints it on stderr as ``pbg <command>: error: ...`` (plus the traceback
  when debugging) and returns the exit status.
- :func:`flows.prefect_host.log_filters.quiet_run_failures` keeps Prefect's failure lines of a flow or task run
  ("Encountered exception during execution", "Task run failed with exception",
  "Finished in state Failed(...)", each with a 40-160 line traceback) off the console:
  the command prints its own line instead. Only the console handler is filtered; the
  run's logs in the Prefect API (and the UI) keep the full traceback.

``--debug`` (every subcommand) or ``PBG_DEBUG=1`` keeps those lines and prints the traceback,
once: :func:`flows.prefect_host.log_filters.one_traceback_on_console` keeps Prefect's copy of it off the console (the
failure lines stay), so the one traceback is :func:`report`'s, of the exception the command
ended with, its cause chain included, right above the error line.
"""

from __future__ import annotations

import os
import sys
import traceback

from pbg_core.errors import PbgError

DEBUG_VARIABLE = "PBG_DEBUG"
EXIT_FAILED = 1
DEBUG_HINT = "rerun with --debug (or PBG_DEBUG=1) for the traceback"


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
