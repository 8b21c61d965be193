"""A tuning study's trials on the workers of an existing Dask cluster, seen from the study's driver.

Before any trial, :func:`open_trial_cluster` checks the cluster as a distributed run does
(:func:`flows.cluster.checks.check_cluster`: the address's form, a scheduler answering there,
through Dask's TLS settings for ``tls://``, at least one worker, this package's code on the
scheduler and every worker, workers able to start the HOGWILD processes), then that every worker
reaches the Prefect API the driver reports to (a trial's ``pbg`` run is a subflow of its
``trial N`` run: :mod:`flows.dask_trials.worker`). Each failure is one
:class:`~pbg_core.errors.ClusterError` line naming the address (and the worker).

Trials at once: at most ``--parallel`` and at most the workers found then (workers joining
later are not used; a lost one is not used again). Each trial runs alone on one worker (pinned
there), and its ``workers`` (HOGWILD processes) is that worker's thread count, the cores the
cluster's operator gave it (``dask worker --nthreads``). Storage credentials the workers resolve
from their own environment are not sent (:func:`tasks.cluster_members.machine_config`).

:func:`train_on_worker` submits the trial and waits for it, answering its validations with the
study's pruner (:mod:`tasks.tune_channel`) about twice a second, and watching its worker and the
scheduler:

- **a lost worker** (missing from two answers of the scheduler in a row): the trial is FAIL,
  ``lost Dask worker ...`` (a worker killed by its memory limit is often the trial's own doing:
  resuming it would only lose the next worker); its directory keeps its committed versions;
- **a lost scheduler** (unreachable for :data:`~tasks.cluster_sessions.SCHEDULER_GRACE_SECONDS`):
  a :class:`ClusterError` that stops the study; its trials in flight stay RUNNING in the study,
  so the next run of the same command resumes them;
- **Ctrl-C / SIGTERM** on the driver: the trial's stop event is set; the run on the worker sees
  it at its next bucket boundary and ends Cancelled there, lease released, committed checkpoint
  intact. The driver waits for that end up to :data:`STOP_WAIT_SECONDS` (its Prefect API, maybe
  the command's own embedded server, must still answer the run's last calls), answering a
  validation in progress, then cancels the task (Dask's cancellation, which the run also sees).
  The trial is INTERRUPTED, resumed by the next run of the study.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

from distributed import Client, Future
from prefect.context import serialize_context
from prefect.settings import PREFECT_API_URL

from flows.cluster.checks import check_cluster, connect
from flows.dask_trials.worker import train_trial
from flows.prefect_host import interrupts
from flows.trial_outcome import TrialEnd, failure_reason
from pbg_core.config import ConfigSchema
from pbg_core.errors import ClusterError
from tasks._policies import run_logger
from tasks.cluster_buckets import LOST_AFTER_POLLS
from tasks.cluster_members import machine_config
from tasks.cluster_sessions import POLL_SECONDS, SCHEDULER_GRACE_SECONDS, live_workers
from tasks.runs import Registry
from tasks.tune_channel import TrialChannel, answer_reports, ask_to_stop, close_channel
from tasks.tune_listeners import Listener
from tasks.tune_study import pruning_listener
from tasks.tune_trials import Slots
from tasks.worker_checks import describe

CHECK_TIMEOUT_SECONDS = 30.0
API_TIMEOUT_SECONDS = 10.0
STOP_WAIT_SECONDS = 8.0  # a tiny bucket and the run's unwinding; within the flow's join of trial threads


@dataclass
class TrialCluster:
    """The cluster a study's trials run on: its client, its workers' threads, which are busy or lost."""

    address: str
    client: Client
    threads: dict[str, int]  # worker -> its thread count (a trial's `workers` there)
    api_url: str
    storage_options: Any  # the base config's, without the credentials the workers resolve themselves
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    busy: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


_CLUSTERS: Registry[TrialCluster] = Registry("Dask cluster of a tuning study")


def open_trial_cluster(address: str, base: ConfigSchema, parallel: int) -> tuple[str, Slots]:
    """Check the cluster at ``address`` for trials of ``base``; its handle and the trials at once.

    Raises:
        ClusterError: a check failed (one line naming the address, and the worker).
    """
    api_url = PREFECT_API_URL.value()
    if not api_url:
        raise ClusterError(
            f"dask_address {address}: trials on a Dask cluster report to a Prefect API every worker reaches, "
            "and this run has none (Prefect's temporary server); set PREFECT_API_URL"
        )
    workers = check_cluster(address, machines=1, timeout=CHECK_TIMEOUT_SECONDS).workers
    client = connect(address, CHECK_TIMEOUT_SECONDS)
    try:
        unreachable = client.run(prefect_api_problem, api_url, workers=list(workers), on_error="return")
        problems = {w: str(p) for w, p in unreachable.items() if p is not None}
        if problems:
            raise ClusterError(f"dask_address {address}: {describe(problems)}")
        info = client.scheduler_info(n_workers=-1)["workers"]
        threads = {w: max(1, int(info[w]["nthreads"])) for w in workers if w in info}
        if not threads:
            raise ClusterError(f"dask_address {address}: every Dask worker left while the cluster was checked")
        sent, _ = machine_config(base, client, list(threads), address, local=False)
    except BaseException:
        client.close()
        raise
    cluster = TrialCluster(address, client, threads, str(api_url), sent.storage_options)
    handle = _CLUSTERS.add("trial-cluster", cluster)
    at_once = max(1, min(parallel, len(threads)))
    sizes = ", ".join(f"{n} thread{'s' * (n != 1)}" for n in sorted(set(threads.values())))
    why = f"--parallel {parallel}, {len(threads)} Dask workers at {address}, one trial each ({sizes}: its workers)"
    return handle, Slots(trials=at_once, workers=min(threads.values()), why=why)


def prefect_api_problem(api_url: str) -> str | None:
    """Why this process cannot reach the Prefect API at ``api_url`` (its health check), or None; runs on a worker."""
    try:
        with urllib.request.urlopen(api_url.rstrip("/") + "/health", timeout=API_TIMEOUT_SECONDS) as answer:
            if answer.status == 200:
                return None
            found = f"HTTP {answer.status}"
    except OSError as exc:
        found = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
    return (
        f"cannot reach the Prefect API at {api_url} ({found}), where each trial's pbg run reports; "
        "set PREFECT_API_URL to a Prefect server every worker reaches (`prefect server start --host 0.0.0.0`)"
    )


def close_trial_cluster(handle: str) -> None:
    """Close the study's client (idempotent); trials still running on workers see their tasks released."""
    cluster = _CLUSTERS.pop(handle)
    if cluster is not None:
        cluster.client.close()


def take_worker(handle: str) -> tuple[str, int]:
    """A free worker for the next trial, and its thread count.

    Raises:
        ClusterError: every worker is lost.
    """
    cluster = _CLUSTERS.get(handle)
    with cluster.lock:
        free = [w for w in sorted(cluster.threads) if w not in cluster.busy and w not in cluster.lost]
        if not free:
            raise ClusterError(
                f"dask_address {cluster.address}: no Dask worker left for the study's trials (lost: "
                f"{', '.join(sorted(cluster.lost)) or 'none'}); the finished trials are kept: run the same "
                "command again once workers are back"
            )
        worker = max(free, key=lambda w: cluster.threads[w])
        cluster.busy.add(worker)
    return worker, cluster.threads[worker]


def give_back(handle: str, worker: str) -> None:
    """``worker`` is free for another trial."""
    cluster = _CLUSTERS.get(handle)
    with cluster.lock:
        cluster.busy.discard(worker)


def train_on_worker(handle: str, worker: str, study: str, number: int, config: ConfigSchema) -> TrialEnd:
    """Train trial ``number``'s ``config`` on ``worker``; how its run ended (the module's cases).

    Call it inside the trial's ``pbg-trial`` flow run: the worker's run is its subflow.

    Raises:
        ClusterError: the scheduler is lost (the study stops; the trial stays RUNNING, resumed later).
    """
    cluster = _CLUSTERS.get(handle)
    channel = TrialChannel.new(cluster.token, number)
    context = {**serialize_context()["flow_run_context"], "parameters": {}}  # no config in clear twice
    sent = config.model_copy(update={"storage_options": cluster.storage_options})
    future = cluster.client.submit(
        train_trial,
        context,
        cluster.api_url,
        sent,
        channel,
        workers=[worker],
        allow_other_workers=False,
        pure=False,
        key=f"pbg-trial-{number}-{uuid.uuid4().hex[:8]}",
    )
    try:
        end = _wait(cluster, future, worker, channel, study, number)
        run_logger().info(
            "trial %d on Dask worker %s: its run %s%s", number, worker, end.kind, f" ({end.reason})" * bool(end.reason)
        )
        return end
    finally:
        future.cancel()  # nothing once it ended; else its run stops at its next bucket boundary
        close_channel(cluster.client, channel)


def _wait(
    cluster: TrialCluster, future: Future[TrialEnd], worker: str, channel: TrialChannel, study: str, number: int
) -> TrialEnd:
    """The trial's end, answering its validations, watching its worker, the scheduler and Ctrl-C."""
    listener = pruning_listener(study, number)
    unreachable_since: float | None = None
    missing = 0  # consecutive polls that did not find the worker
    while True:
        signum = interrupts.received()
        if signum is not None:
            return _stop(cluster, future, channel, listener, f"interrupted by {signal.Signals(signum).name}")
        known = live_workers(cluster.client) if cluster.client.status == "running" else None
        if known is None:
            unreachable_since = unreachable_since or time.monotonic()
            if (
                cluster.client.status in ("closing", "closed")
                or time.monotonic() - unreachable_since > SCHEDULER_GRACE_SECONDS
            ):
                raise ClusterError(
                    f"dask_address {cluster.address}: lost the Dask scheduler while trial {number} trained on {worker}; "
                    "the finished trials are kept in study.db: run the same command again once the scheduler is "
                    "back (the trials in flight resume)"
                )
            time.sleep(POLL_SECONDS)
            continue
        unreachable_since = None
        answer_reports(cluster.client, channel, listener)
        missing = 0 if worker in known else missing + 1
        if missing >= LOST_AFTER_POLLS:
            with cluster.lock:
                cluster.lost.add(worker)
            return TrialEnd(
                "failed", f"lost Dask worker {worker} while it trained the trial (its last committed version stays)"
            )
        end = _result(future)
        if end is not None:
            return end


def _stop(
    cluster: TrialCluster, future: Future[TrialEnd], channel: TrialChannel, listener: Listener, why: str
) -> TrialEnd:
    """Ask the trial's run to stop and wait (bounded) for it to end; the trial's cancelled end."""
    try:
        ask_to_stop(cluster.client, channel)
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while future.status == "pending" and time.monotonic() < deadline:
            answer_reports(cluster.client, channel, listener)  # a validation in progress waits for its verdict
            _result(future)
    except Exception as exc:  # noqa: BLE001 - stopping goes on: the task is cancelled by the caller anyway
        run_logger().warning("%s; asking the trial's run to stop failed (%s: %s)", why, type(exc).__name__, exc)
        return TrialEnd("cancelled", f"{why}; asking its run to stop failed ({type(exc).__name__}: {exc})")
    ended = "stopped" if future.status != "pending" else f"still running after {STOP_WAIT_SECONDS:g} s, cancelled"
    return TrialEnd("cancelled", f"{why}: its run on the Dask worker {ended}")


def _result(future: Future[TrialEnd]) -> TrialEnd | None:
    """The trial's end if it came within a poll; None if it did not (yet)."""
    try:
        return future.result(timeout=POLL_SECONDS)
    except TimeoutError:
        return None
    except Exception as exc:  # noqa: BLE001 - the function failed on the worker (its run's own failures are states)
        if future.status == "cancelled":
            return None  # the client lost the scheduler: the next poll decides
        return TrialEnd("failed", failure_reason(exc))
