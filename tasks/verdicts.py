"""Expected verdicts: a flow or task run that ends Failed with one line, not with an exception.

A retraining run whose quality gate failed, or that found nothing new under
``retrain.on_no_new_data: fail``, did its job: it judged and said no. Raising would end the run
as a crash does, with Prefect's tracebacks in its logs. Instead the run *returns*
:func:`verdict`'s ``Failed`` state (Prefect keeps a returned state as given: name "Failed", so
the UI's state filters find it, and the message as given), and this module remembers the run's
id, the one record of which runs of this process ended in a verdict:

- :class:`flows.prefect_host.log_filters.VerdictFilter` drops Prefect's failure lines and their
  tracebacks for those runs (:func:`is_verdict_run`);
- the ``pbg retrain`` command turns such a state into :class:`Verdict`, whose one line it prints
  (:func:`verdict_of`).

Prefect is imported inside the functions: the command line imports this module before it runs
a flow.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from pbg_core.errors import PbgError

if TYPE_CHECKING:
    from prefect.client.schemas.objects import State

_verdict_runs: set[str] = set()  # ids of the flow and task runs of this process that ended in a verdict
_lock = threading.Lock()


class Verdict(PbgError):
    """A run ended in an expected verdict (a failed quality gate, no new data): its state's message."""


def verdict(message: str) -> State:
    """A ``Failed`` state with ``message``, for the current task run (else flow run) to return.

    Records the run's id (:func:`is_verdict_run`). Outside a run nothing is recorded.
    """
    from prefect.context import FlowRunContext, TaskRunContext
    from prefect.states import Failed

    task_run, flow_run = TaskRunContext.get(), FlowRunContext.get()
    run_id = (
        task_run.task_run.id
        if task_run is not None
        else flow_run.flow_run.id
        if flow_run is not None and flow_run.flow_run is not None
        else None
    )
    if run_id is not None:
        with _lock:
            _verdict_runs.add(str(run_id))
    return Failed(message=message)


def is_verdict_run(run_id: object) -> bool:
    """Whether the flow or task run ``run_id`` (a UUID or its text) ended in :func:`verdict` in this process."""
    with _lock:
        return str(run_id) in _verdict_runs


def is_verdict(state: State) -> bool:
    """Whether ``state`` (of a task run, else of a flow run) is a :func:`verdict` of this process."""
    details = state.state_details
    run_id = details.task_run_id or details.flow_run_id
    return state.is_failed() and run_id is not None and is_verdict_run(run_id)


def verdict_of(state: State) -> Verdict | None:
    """:class:`Verdict` with the state's message when ``state`` is a verdict (:func:`is_verdict`), else None."""
    return Verdict(state.message or "") if is_verdict(state) else None


__all__ = ["Verdict", "is_verdict", "is_verdict_run", "verdict", "verdict_of"]
