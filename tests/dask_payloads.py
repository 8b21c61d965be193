"""What a Dask scheduler receives with each task: a scheduler plugin that keeps every task's payload.

:class:`PayloadRecorder` (registered with ``Client.register_plugin``; the scheduler imports this
module: tests/dask_processes.py puts this directory on its ``PYTHONPATH``) pickles the run spec of
every task that reaches the scheduler (the function and its arguments, as the client sent them),
and :func:`recorded_payloads` (``Client.run_on_scheduler``) hands them back, so a test can look
for a value in the bytes that crossed the client's connection.
"""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.protocol.pickle import dumps

NAME = "payload-recorder"


class PayloadRecorder(SchedulerPlugin):
    """Keeps the pickled run spec of every task submitted to the scheduler."""

    name = NAME

    def __init__(self) -> None:
        self.payloads: list[bytes] = []

    def update_graph(self, scheduler: Any, *, tasks: list[Any], **kwargs: Any) -> None:
        for key in tasks:
            state = scheduler.tasks.get(key)
            if state is not None and state.run_spec is not None:
                self.payloads.append(dumps(state.run_spec))


def recorded_payloads(dask_scheduler: Any) -> list[bytes]:
    """The payloads recorded so far (runs on the scheduler)."""
    return list(dask_scheduler.plugins[NAME].payloads)


def echo(value: Any) -> Any:
    """A task that returns its argument (the recorder's own check: what it is given, it sees)."""
    return value
