"""Iteration subflows in order, each one's Prefect bookkeeping overlapped with the previous one's work.

bench.pipeline's alternative to the product. ``flows/train.py`` calls each iteration's subflow once
the previous one has ended, with the subflows' heartbeats off, so the run's timeline shows one
iteration at a time (issue 34). Until then the product ran its subflows through this module; it
stays here so that the benchmark can measure what that order costs (docs/prefect-costs.md).

A Prefect subflow spends ~0.15 s in API round trips before its body runs (the parent's
tracking task run, the flow run, its name, its Running state) and ~0.03 s after it (its
final state). One after another, all of that sits between two iterations' training. Here:

- each subflow is *called* in a helper thread, started while the previous iteration is
  still working, so its creation overlaps that work, and its ending overlaps the next;
- its *body* is handed back to the driving thread (the ``pbg`` flow's own) through
  :func:`run_body`, and runs there in the subflow's context once the previous body is done.

So the work itself never overlaps and never leaves the driving thread: bodies run one at a
time, in order. But in the UI an iteration's subflow shows Running from its creation, while the
previous one still works: two iterations Running at once on the timeline. When a body fails,
the subflow created ahead is cancelled without running anything, and the failure propagates as
if the subflows had run in turn.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from prefect.client.schemas.objects import State
from prefect.states import Cancelled

R = TypeVar("R")

# The call a helper thread is making (set in its context only): how run_body finds the driver.
_CALL: contextvars.ContextVar[_Call[Any] | None] = contextvars.ContextVar("pbg_subflow_call", default=None)
_JOIN_AFTER_INTERRUPT_SECONDS = 5.0


@dataclass
class _Body:
    """A subflow body waiting for the driving thread, in the subflow's context."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    context: contextvars.Context
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    cancelled: str | None = None  # why it must not run

    def execute(self) -> None:
        """Run in the driving thread; the outcome goes back to the subflow's thread."""
        try:
            self.result = self.context.run(self.fn, *self.args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the subflow (which then fails), and by the driver
            self.error = exc
        finally:
            self.done.set()


class _Call(Generic[R]):
    """One subflow call in its helper thread: its body (once posted) and its outcome."""

    def __init__(self, call: Callable[[], R], name: str) -> None:
        self.body_ready = threading.Event()
        self.finished = threading.Event()
        self.body: _Body | None = None
        self.cancelled: str | None = None
        self._lock = threading.Lock()  # post and cancel must not interleave
        self._result: R | None = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        context.run(_CALL.set, self)
        self._thread = threading.Thread(target=context.run, args=(self._run, call), name=name, daemon=True)
        self._thread.start()

    def _run(self, call: Callable[[], R]) -> None:
        try:
            self._result = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the driving thread by result()
            self._error = exc
        finally:
            self.finished.set()
            self.body_ready.set()  # a call that ended without posting a body has none

    def post(self, body: _Body) -> None:
        """Called from the subflow's body (helper thread): hand it to the driver."""
        with self._lock:
            if self.cancelled is not None:
                body.cancelled = self.cancelled
                body.done.set()
            self.body = body
        self.body_ready.set()

    def cancel(self, reason: str) -> None:
        """Make the body return a Cancelled state instead of running (if it has not run)."""
        with self._lock:
            self.cancelled = reason
            if self.body is not None and not self.body.done.is_set():
                self.body.cancelled = reason
                self.body.done.set()

    def result(self, timeout: float | None = None) -> R:
        """The subflow call's return value, once its thread is done; re-raises its exception."""
        if not self.finished.wait(timeout):
            raise TimeoutError(f"{self._thread.name} did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # _result is set (a T) whenever _error is None and the thread finished


class SubflowPipeline:
    """Drives subflow calls in order from the calling thread (see the module docstring)."""

    def run_in_order(
        self,
        calls: Sequence[Callable[[], R]],
        names: Sequence[str],
        overlap_after: Callable[[int], bool],
    ) -> Generator[R, None, None]:
        """Call every subflow of ``calls``; yields their results in order.

        Args:
            calls: Zero-argument callables that each call one subflow whose body uses :func:`run_body`.
            names: A thread name per call (for debugging).
            overlap_after: Whether call ``i + 1`` may be created while call ``i``'s body runs
                (False e.g. before a pause: nothing new starts until the caller resumes).
        """
        pending: deque[_Call[R]] = deque()  # bodies done, subflows maybe still ending (in order)
        ahead = self._start(calls, names, 0) if calls else None
        for index in range(len(calls)):
            current = ahead if ahead is not None else self._start(calls, names, index)
            ahead = None
            try:
                current.body_ready.wait()
                if index + 1 < len(calls) and overlap_after(index):
                    ahead = self._start(calls, names, index + 1)
                body = current.body
                if body is not None:
                    body.execute()
                failed = body is not None and body.error is not None
                # Hand out the results of subflows that have ended; wait for none (a deployed
                # run's subflow joins its heartbeat thread as it ends: up to a second) unless
                # nothing may start before the caller has seen them.
                while pending and (failed or ahead is None or pending[0].finished.is_set()):
                    yield pending.popleft().result()
                if failed:
                    raise body.error  # type: ignore[union-attr, misc]  # failed is only set once body.error holds the exception
                pending.append(current)
                if ahead is None:
                    while pending:
                        yield pending.popleft().result()
            except BaseException:
                self._abandon(ahead, list(pending), current)
                raise
        while pending:
            yield pending.popleft().result()

    def _start(self, calls: Sequence[Callable[[], R]], names: Sequence[str], index: int) -> _Call[R]:
        return _Call(calls[index], names[index])

    @staticmethod
    def _abandon(ahead: _Call[Any] | None, pending: list[_Call[Any]], current: _Call[Any]) -> None:
        """After a failure or an interrupt: cancel the calls whose body has not run, let the others end.

        ``current``'s body has not run when the interrupt came while the driver waited for it.
        """
        if ahead is not None:
            ahead.cancel("not run: the iteration before it did not complete")
        current.cancel("not run: the run was interrupted")
        for call in [*pending, current, *([ahead] if ahead is not None else [])]:
            call.finished.wait(_JOIN_AFTER_INTERRUPT_SECONDS)


def run_body(fn: Callable[..., R], *args: Any) -> R | State:
    """Run a subflow's body: in the driving thread when called through a pipeline, else right here.

    Returns ``fn``'s result, or a Cancelled state when the pipeline cancelled this subflow
    before its turn; re-raises what ``fn`` raised (so the subflow fails with it).
    """
    call = _CALL.get()
    if call is None:
        return fn(*args)
    body = _Body(fn=fn, args=args, context=contextvars.copy_context())
    call.post(body)
    body.done.wait()
    if body.cancelled is not None:
        return Cancelled(message=body.cancelled)
    if body.error is not None:
        raise body.error
    return body.result  # type: ignore[no-any-return]  # body.result holds what the body returned, typed by the caller's T
