"""What runs on a Dask worker for a tuning trial: the ``pbg`` flow, as ``pbg train`` runs it.

The worker runs the trial's whole ``pbg`` flow in the task's thread: the same plan, lease,
bucket loop, HOGWILD processes, commit steps, validation, ``best.json`` and early stopping as
``pbg train`` and as a trial in the driver's process, so a trial scores the same wherever it
trains. Not the engine alone (as a distributed run's bucket does, :mod:`tasks.machines`): a trial
is a whole run, and the run's resumability, lease and validation are the flow's. Its flow run is
a subflow of the driver's ``trial N`` run (Prefect's own ``serialize_context`` /
``hydrated_context``, the way Prefect's Dask task runner places tasks), reporting to the driver's
Prefect API; so every worker must reach that API (checked before any trial,
:mod:`flows.dask_trials.placement`). Only the API's URL crosses from the driver's settings:
everything else is the worker's own Prefect configuration.

- **Pruning**: the run's listener (:mod:`tasks.tune_listeners`) is :func:`tasks.tune_channel.channel_listener`:
  each validation goes to the driver through Dask queues, and the pruner's verdict comes back
  (bounded wait: a driver that does not answer lets the trial go on).
- **Stopping**: Dask cannot stop a running task, so the run asks at each bucket boundary
  (:func:`flows.prefect_host.interrupts.stopping_when`) whether the study asked it to stop (its
  Ctrl-C: the trial's stop event, :func:`tasks.tune_channel.stop_asked`) or its task is no longer
  wanted (cancelled, or released because the driver's client left the scheduler: the worker's
  state of the task says so), and ends Cancelled there: its lease is released, the committed
  checkpoint stays, the next run of the study resumes the directory.

This module is imported by the worker when it unpickles the task (every worker needs this
package at the driver's version: checked before any trial).
"""

import os
from collections.abc import Callable
from typing import Any, cast

from distributed import get_worker
from prefect.client.schemas.objects import State
from prefect.context import hydrated_context
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows.prefect_host.interrupts import stopping_when
from flows.train import pbg
from flows.trial_outcome import TrialEnd, end_of
from pbg_core.config import ConfigSchema
from tasks.machines import undo_dask_malloc_trim
from tasks.tune_channel import TrialChannel, channel_listener, stop_asked
from tasks.tune_listeners import listening

RUNNING = ("executing", "long-running")  # a Dask worker's states of a task it still runs for someone


def train_trial(flow_context: dict[str, Any], api_url: str, config: ConfigSchema, channel: TrialChannel) -> TrialEnd:
    """Train a trial's ``config`` with the ``pbg`` flow on this worker; how its run ended.

    Args:
        flow_context: The driver's ``trial N`` flow run context (Prefect's ``serialize_context``,
            without its parameters): the run here is its subflow.
        api_url: The Prefect API the driver reports to.
        config: The trial's config (credentials the workers resolve themselves left out).
        channel: The trial's queues to the study's pruner.
    """
    undo_dask_malloc_trim()  # as a distributed run's machine: Dask's malloc setting slows training 2.7x
    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)  # the HOGWILD children inherit the environment
    with (
        temporary_settings(updates={PREFECT_API_URL: api_url}),
        hydrated_context({"flow_run_context": flow_context}),
        stopping_when(_stop_check(channel)),
        listening(config.checkpoint_path, channel_listener(channel)),
    ):
        # return_state=True: Prefect returns the run's final state (Flow.__call__'s overloads do not say so).
        state = cast(State[dict[str, Any]], pbg(config=config, return_state=True))
    return end_of(state)


def _stop_check(channel: TrialChannel) -> Callable[[], str | None]:
    """A reason to stop once the study asked the trial to, or Dask cancelled or released its task."""
    worker = get_worker()
    key = worker.get_current_task()  # Dask's own: the key of the task this thread runs

    def cancelled() -> str | None:
        task = worker.state.tasks.get(key)
        if task is None or task.state not in RUNNING:
            return "the tuning study's driver is gone: its task on this Dask worker was released"
        return "the tuning study stopped (Ctrl-C on its driver)" if stop_asked(channel) else None

    return cancelled
