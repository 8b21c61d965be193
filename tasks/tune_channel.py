"""How a tuning trial on a Dask worker hears the study's pruner and its stop: two queues and an event.

A trial placed on a Dask worker (``flows/dask_trials``) runs the ``pbg`` flow there, while the
study (Optuna, ``study.db``) stays in the driver's process. Each validation of the trial's run
crosses the cluster through Dask's own :class:`distributed.Queue` (held by the scheduler), named
per study run and trial (:class:`TrialChannel`):

- on the worker, :func:`channel_listener` is the run's listener (:mod:`tasks.tune_listeners`): it
  puts ``(index, epoch, value)`` on the trial's ``reports`` queue, then waits for the verdict on
  its ``verdicts`` queue: ``(index, reason)``, a reason to stop (pruned) or ``""`` (go on). A
  verdict for an earlier validation (one that came after its wait ran out) is dropped, so a late
  answer never decides a later validation;
- on the driver, :func:`answer_reports` (called by the trial's waiting loop about twice a
  second) takes every report waiting, asks the study's pruner (the trial's in-process
  listener, :func:`tasks.tune_study.pruning_listener`) and puts its verdict back.

A driver that stops answering (killed, its machine gone) does not hold the trial forever: the
worker waits at most :data:`VERDICT_WAIT_SECONDS` per validation, then goes on unpruned and says
so in its log. Nothing here knows Optuna: the driver passes its listener in.

A study that stops (Ctrl-C) sets the trial's ``stop`` :class:`distributed.Event`
(:func:`ask_to_stop`); the run on the worker asks it at each bucket boundary (:func:`stop_asked`)
and ends there, while the driver's Prefect API still answers its last calls.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from distributed import Client, Event, Queue

from tasks.tune_listeners import Listener

logger = logging.getLogger(__name__)

VERDICT_WAIT_SECONDS = 60.0  # the driver answers within a second or two; this is for a driver gone
GO_ON = ""  # the verdict "not pruned" (a queue item cannot be None)


@dataclass(frozen=True)
class TrialChannel:
    """The names of one trial's queues and stop event on the scheduler: unique per study run and trial."""

    reports: str
    verdicts: str
    stop: str

    @classmethod
    def new(cls, study: str, number: int) -> TrialChannel:
        """Fresh names for trial ``number`` of ``study`` (a rerun never reads an earlier run's leftovers)."""
        prefix = f"pbg-tune-{study}-trial-{number}-{uuid.uuid4().hex[:8]}"
        return cls(reports=f"{prefix}-reports", verdicts=f"{prefix}-verdicts", stop=f"{prefix}-stop")


def channel_listener(channel: TrialChannel) -> Listener:
    """The listener of a run on a Dask worker: report to the driver, wait (bounded) for its verdict."""

    def heard(index: int, epoch: int, value: float) -> str | None:
        Queue(channel.reports).put((index, epoch, value))
        deadline = time.monotonic() + VERDICT_WAIT_SECONDS
        verdicts = Queue(channel.verdicts)
        while (left := deadline - time.monotonic()) > 0:
            try:
                answered, reason = verdicts.get(timeout=left)
            except TimeoutError:
                break
            if int(answered) == index:
                return str(reason) or None
            logger.debug("dropped the late pruning verdict of validation %s (now at %d)", answered, index)
        logger.warning(
            "no pruning verdict from the tuning study within %g s of validation %d (epoch %d): "
            "the trial goes on unpruned",
            VERDICT_WAIT_SECONDS,
            index,
            epoch,
        )
        return None

    return heard


def answer_reports(client: Client, channel: TrialChannel, listener: Listener) -> int:
    """Answer every report waiting on ``channel`` with ``listener``'s verdict; how many were answered."""
    reports = Queue(channel.reports, client=client)
    waiting = reports.get(batch=True)  # all there is now, without waiting
    verdicts = Queue(channel.verdicts, client=client)
    for index, epoch, value in waiting:
        verdicts.put((int(index), listener(int(index), int(epoch), float(value)) or GO_ON))
    return len(waiting)


def ask_to_stop(client: Client, channel: TrialChannel) -> None:
    """Ask the trial's run to stop at its next bucket boundary (driver side)."""
    Event(channel.stop, client=client).set()


def stop_asked(channel: TrialChannel) -> bool:
    """Whether the study asked the trial's run to stop (worker side, at a bucket boundary)."""
    return bool(Event(channel.stop).is_set())


def close_channel(client: Client, channel: TrialChannel) -> None:
    """Drop the trial's queues and event from the scheduler (best effort: a scheduler gone has none left)."""
    try:
        for name in (channel.reports, channel.verdicts):
            Queue(name, client=client).close()
        Event(channel.stop, client=client).clear()
    except Exception as exc:  # noqa: BLE001 - what is left behind costs the scheduler a few bytes
        logger.debug("could not drop the Dask queues and event of %s: %s", channel.reports, exc)
