"""Ctrl-C and SIGTERM in a ``pbg`` command: one orderly stop, Cancelled flow runs, a resume hint.

What a stop does, whichever of the two signals asks for it:

- **The first signal** raises :class:`KeyboardInterrupt` in the main thread, where the flow
  bodies, the tasks and the HOGWILD coordinator run (:func:`install`): whatever is running
  unwinds through its ``finally`` blocks (the worker pool is closed, the lease released),
  so the command ends within a second or two of the signal. SIGTERM takes the same path
  as SIGINT (Python's default would end the process at once, skipping all of that).
  Inside a flow run Prefect turns SIGTERM into its own ``TerminationSignal``: handled
  alike in a ``pbg`` command (a run a Prefect worker cancels or reschedules is left to
  Prefect, and outside a ``pbg`` command a SIGTERM keeps Prefect's meaning). A signal that lands in a ``__del__`` or a weakref callback, where Python would
  print the exception as ignored and carry on, or in importlib's own code, where an exception
  can leave the import lock held, is delivered again a few ms later (by Prefect's SIGTERM
  bridge too, during a flow run of a ``pbg`` command: :func:`flow_call`).
- **Other threads** (a tuning study's trials) see the stop at their next bucket boundary
  (:func:`stop_if_signalled`) and unwind the same way. A run with no signal to see (a trial on a
  Dask worker, whose study's driver asked it to stop) is given a check by :func:`stopping_when`,
  asked at the same boundaries: it ends Cancelled with the check's reason, and no signal is
  recorded in its process (the worker's next trials run as usual).
- **Flow runs end Cancelled**, not Crashed: :func:`cancel_on_interrupt` wraps a flow
  function so that an interrupt unwinding out of its body becomes a returned ``Cancelled``
  state, which Prefect records as the run's final state (Prefect itself marks a run it
  sees interrupted as Crashed, the state of a process that died).
- **The checkpoint stays committed:** the version pointer is written atomically, so an
  interrupt leaves either the new version or the previous one committed; the hint reads
  the pointer back from storage rather than trusting what memory says.
- **A repeated signal** while the first one is being handled ends the command at once
  (``os._exit``, same exit status): a user pressing Ctrl-C twice wants out now. The API
  server and the HOGWILD workers end with the process anyway (see :mod:`flows.prefect_host.local_server`
  and :func:`pbg_core.parallel.worker.exit_with`).
- **The hint** (:func:`interruption_report`) names the signal, where the run was
  (:func:`note_position`), what is committed (:func:`describe_checkpoint_with`) and the
  command line that resumes: the user's own, credentials hidden.

The command's exit status is 128 + the signal number: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import os
import shlex
import signal
import sys
import threading
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any, TypeVar

R = TypeVar("R")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REDELIVER_SECONDS = 0.005
HIDDEN = "<hidden>"


@dataclass
class _Stop:
    """The command's interrupt state (this module is its only writer)."""

    signum: int | None = None
    position: str | None = None  # the iteration in flight, e.g. "epoch 3/10, path 1/1, chunk 2/4"
    checkpoint: Callable[[], str] | None = None  # describes what is committed, read at report time
    redelivering: bool = False  # the next signal is our own re-delivery (see _handle), not a repeat
    installed: bool = False  # install() ran: this process is a `pbg` command


_stop = _Stop()

# A run's own reason to stop (None: go on), asked at each bucket boundary: see stopping_when.
_ASKED: contextvars.ContextVar[Callable[[], str | None] | None] = contextvars.ContextVar("pbg_stop_check", default=None)


class StopRequested(KeyboardInterrupt):
    """A stop asked for by the run's owner (:func:`stopping_when`), not by a signal to this process."""


def install() -> None:
    """Make SIGINT and SIGTERM raise :class:`KeyboardInterrupt` in the main thread (once).

    A later signal while the first is being handled ends the process at once. Does nothing
    outside the main thread (only there can handlers be set, e.g. ``main()`` run by a test).
    """
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        signal.signal(signum, _handle)
    _stop.installed = True


def _handle(signum: int, frame: FrameType | None) -> None:
    if _stop.redelivering:
        _stop.redelivering = False
    elif _stop.signum is not None:
        _force_exit(signum)
    _stop.signum = _stop.signum or signum
    if frame is not None and _unsafe_to_raise_in(frame):
        # Raised here, the interrupt would be lost or would wedge the process (see
        # _unsafe_to_raise_in): deliver it again a moment later, in whatever runs then.
        _stop.redelivering = True
        threading.Timer(REDELIVER_SECONDS, os.kill, (os.getpid(), signum)).start()
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _unsafe_to_raise_in(frame: FrameType) -> bool:
    """Whether raising in ``frame`` would lose the interrupt or wedge the process.

    - A ``__del__`` or a weakref callback (run by the garbage collector): Python prints what it
      raises as "Exception ignored" and carries on, so the command would not stop.
    - importlib's own code: its lock helpers take the global import lock and only then enter
      their ``try`` (for example the weakref callback ``_get_module_lock.<locals>.cb``); an
      exception between the two leaves the lock held, and every later import in every thread
      waits for it forever (seen in CI: a Ctrl-C while the server started hung the command).
      A module being imported runs in its own frame, not importlib's: interrupts land there.
    """
    code = frame.f_code
    if code.co_filename.startswith("<frozen importlib"):
        return True
    return code.co_name == "__del__" or os.path.basename(code.co_filename) in ("weakref.py", "_weakrefset.py")


def _force_exit(signum: int) -> None:
    print(f"pbg: {signal.Signals(signum).name} again: stopping now", file=sys.stderr, flush=True)
    os._exit(exit_code())


def note_signal(signum: int) -> None:
    """Record a stop signal seen by someone else's handler (Prefect's SIGTERM bridge)."""
    if _stop.signum is None:
        _stop.signum = signum


def stop_if_signalled() -> None:
    """In a thread other than the main one, raise :class:`KeyboardInterrupt` once a stop signal arrived.

    Signal handlers run in the main thread only: a ``pbg`` run in another thread (a tuning
    trial's, flows/tune.py) calls this at each bucket boundary, so it stops there and unwinds
    as the main thread's run would. In the main thread the handler has raised already.
    """
    if _stop.signum is not None and threading.current_thread() is not threading.main_thread():
        raise KeyboardInterrupt(signal.Signals(_stop.signum).name)
    reason = _asked_reason()
    if reason is not None:
        raise StopRequested(reason)


@contextlib.contextmanager
def stopping_when(check: Callable[[], str | None]) -> Iterator[None]:
    """Inside the block (and the threads its flow runs start, which copy its context), ask ``check``
    at each bucket boundary: a reason stops the run there as an interrupt would, Cancelled with it."""
    token = _ASKED.set(check)
    try:
        yield
    finally:
        _ASKED.reset(token)


def _asked_reason() -> str | None:
    check = _ASKED.get()
    return check() if check is not None else None


def received() -> int | None:
    """The signal that asked this command to stop, or None."""
    return _stop.signum


def exit_code() -> int:
    """128 + the stop signal's number (130 for SIGINT, the default, 143 for SIGTERM)."""
    return 128 + int(_stop.signum or signal.SIGINT)


def note_position(label: str) -> None:
    """Say where the run is (an iteration's label), for the hint if it is interrupted."""
    _stop.position = label


def describe_checkpoint_with(describe: Callable[[], str]) -> None:
    """How to say what is committed at report time, e.g. ``the committed checkpoint is version 5``."""
    _stop.checkpoint = describe


def stop_signal_of(exc: BaseException) -> int | None:
    """The signal behind ``exc`` if it is an interrupt of ours (a KeyboardInterrupt, or the
    TerminationSignal Prefect raises for a SIGTERM to a ``pbg`` command), or any error once a
    stop signal has reached this command: Prefect's task engine, interrupted while it starts a
    task run, raises ``ValueError: Task run is not set`` instead of the interrupt, and the user
    who asked to stop must see the stop (exit 130/143, the resume hint), not that."""
    if isinstance(exc, KeyboardInterrupt):
        return _stop.signum or signal.SIGINT
    if type(exc).__name__ == "TerminationSignal" and _stop.installed and _prefect_intent() is None:
        return int(getattr(exc, "signal", signal.SIGTERM))
    if isinstance(exc, Exception) and _stop.signum is not None:
        return _stop.signum
    return None


def _prefect_intent() -> object:
    """What a Prefect runner said its SIGTERM means (cancel, reschedule, ...), None if it said nothing.

    A run started by a Prefect worker or ``flow.serve`` is cancelled or rescheduled that way:
    Prefect's engine handles those itself. (Prefect 3.9's control listener; None if it moved.)
    """
    try:
        from prefect._internal.control_listener import get_intent
    except ImportError:
        return None
    return get_intent()


def cancel_on_interrupt(fn: Callable[..., R]) -> Callable[..., R]:
    """Wrap a flow function: an interrupt unwinding out of it returns a ``Cancelled`` state.

    Prefect records a state returned by a flow function as the run's final state; the
    caller (:func:`raise_if_interrupted`) turns it back into the interrupt. Put it between
    ``@flow`` and the function: the signature, annotations and docstring are kept.
    """

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> R:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            asked = _asked_reason() if isinstance(exc, (StopRequested, Exception)) else None
            if asked is not None:  # its owner stopped it (a child's Cancelled end comes up as an Exception)
                from prefect.states import Cancelled

                return Cancelled(message=f"stopped: {asked}")  # type: ignore[return-value]  # as below
            signum = stop_signal_of(exc)
            if signum is None:
                raise
            note_signal(signum)
            from prefect.states import Cancelled

            where = f" during {_stop.position}" if _stop.position else ""
            # What the interrupt turned into on its way out, if not itself (kept for the run's page).
            how = (
                ""
                if isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "TerminationSignal"
                else f" (while stopping: {type(exc).__name__}: {exc})"
            )
            return Cancelled(message=f"interrupted by {signal.Signals(signum).name}{where}{how}")  # type: ignore[return-value]  # a flow may return its Cancelled state: Prefect makes it the run's final state

    # Resolved against fn's module: Prefect (pydantic) would resolve string annotations (a
    # module with `from __future__ import annotations`) against this module's globals.
    wrapped.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]  # functions take a __signature__; typeshed does not declare it
    wrapped.__annotations__ = typing.get_type_hints(fn, include_extras=True)
    return wrapped


@contextlib.contextmanager
def flow_call() -> Iterator[None]:
    """Around a flow call: its Cancelled end after one of our interrupts raises KeyboardInterrupt.

    Calling a flow whose final state is Cancelled raises Prefect's ``CancelledRun``.
    """
    from prefect.exceptions import CancelledRun

    _defer_prefect_sigterm()
    try:
        yield
    except CancelledRun as exc:
        if _stop.signum is None:
            raise
        raise KeyboardInterrupt(signal.Signals(_stop.signum).name) from exc


def _defer_prefect_sigterm() -> None:
    """Give Prefect's SIGTERM bridge the care :func:`_handle` takes, in this ``pbg`` command (once).

    During a flow run Prefect's own handler raises ``TerminationSignal``; raised in a weakref
    callback, Python prints it as ignored and the run goes on to the end (seen in CI: a SIGTERM
    while a version was committed ended the command with 0). Prefect installs and recognises its
    handler by the module's name for it, so the deferring one takes that name.
    """
    from prefect.utilities import engine

    prefect_handler = engine._prefect_sigterm_handler
    if getattr(prefect_handler, "defers_unsafe_frames", False):
        return

    def deferring(signum: int, frame: FrameType | None = None, *args: object) -> None:
        if frame is not None and _unsafe_to_raise_in(frame):
            threading.Timer(REDELIVER_SECONDS, os.kill, (os.getpid(), signum)).start()
            return
        prefect_handler(signum, frame, *args)

    deferring.defers_unsafe_frames = True  # type: ignore[attr-defined]
    engine._prefect_sigterm_handler = deferring  # type: ignore[assignment]


def committed_checkpoint(url: str, storage_options: Any) -> str:
    """``the committed checkpoint is version N (URL)``, read from the version pointer now.

    Reads the pointer file itself rather than through ``storage.checkpoints``: that module
    imports torch, and an interrupt can land while torch is half imported (then it never
    imports again in this process).
    """
    from storage import layout
    from storage.errors import DataNotFound
    from storage.fs import reads, urls

    try:
        text = reads.read_text(urls.join_url(url, layout.VERSION_FILE), storage_options).strip()
    except DataNotFound:
        text = "0"  # no pointer yet: nothing committed (CheckpointStore.read_version's rule)
    return f"the committed checkpoint is version {text or 0} ({url})"


def interruption_report(command: str, argv: Sequence[str]) -> str:
    """What to print once the command has stopped: where, what is committed, how to resume."""
    name = signal.Signals(_stop.signum or signal.SIGINT).name
    parts = [f"pbg {command}: interrupted by {name}"]
    if _stop.position:
        parts[0] += f" during {_stop.position}"
    if _stop.checkpoint is not None:
        try:
            parts.append(_stop.checkpoint())
        except Exception as exc:  # noqa: BLE001 - the hint must not hide the interrupt
            parts.append(f"the committed checkpoint could not be read ({exc})")
    verb = "resume with" if command == "train" else "run it again with"
    parts.append(f"{verb}: {command_line(argv)}")
    return "; ".join(parts)


def command_line(argv: Sequence[str]) -> str:
    """``pbg ARGS...`` quoted for a POSIX shell, with credential overrides hidden.

    ``-p storage_options.secret=...`` (any key :func:`is_secret_name` calls a credential)
    shows ``<hidden>`` instead of its value: give it again, or use the AWS_* variables.
    """
    words = list(argv)
    shown = []
    for index, word in enumerate(words):
        previous = words[index - 1] if index else ""
        if previous in ("-p", "--param") or (word.startswith(("--param=", "-p")) and "=" in word):
            word = _hide_secret(word)
        shown.append(word)
    return shlex.join(["pbg", *shown])


def _hide_secret(word: str) -> str:
    """``KEY=VALUE`` (optionally prefixed by ``-p``/``--param=``) with VALUE hidden if KEY is a credential."""
    prefix = ""
    for flag in ("--param=", "-p"):
        if word.startswith(flag) and word != flag:
            prefix, word = flag, word[len(flag) :]
            break
    from pbg_core.config.storage_options import is_secret_name  # pydantic: not on the command's start-up path

    key, sep, _value = word.partition("=")
    if sep and key.startswith("storage_options") and any(is_secret_name(p) for p in key.split(".")[1:]):
        return f"{prefix}{key}={HIDDEN}"
    return prefix + word
