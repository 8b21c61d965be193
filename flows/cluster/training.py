"""A pass of a distributed run: the flow hands buckets to Dask workers as PBG's lock server does.

Inside an iteration subflow, :func:`train_on_cluster` keeps every machine busy: whenever one
is free it asks the coordinator for a bucket none of whose partitions is held elsewhere
(:func:`tasks.cluster_sessions.assign_bucket`), submits ``train bucket (l, r) on <worker>``
(a task on the flow's thread pool driving one Dask future pinned to that worker), and when a
bucket comes back, ``record-bucket`` makes it durable before its locks are freed. About once a
second it asks who is in the cluster: a worker that left is reported, one that joined is
checked before it gets a bucket (:mod:`tasks.cluster_members`).

A worker lost mid-bucket (killed, out of memory, its machine gone) gives its bucket back: the
next free worker trains it from its partitions' last saved state. A transient storage error
is retried by the bucket's task (:mod:`tasks.cluster_buckets`). Any other failure stops
handing out buckets; the ones in flight finish and are recorded, then the first error fails
the iteration (a retry resumes after the recorded buckets). An interrupt (Ctrl-C) or a lost
scheduler abandons the buckets in flight at once (:func:`tasks.cluster_sessions.stop_buckets`):
nothing waits for them, and the rerun trains them again.

:func:`cluster_address` is where the cluster comes from: ``dask_address`` (checked first),
else a ``distributed.LocalCluster`` of ``num_machines`` worker processes on this machine.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from queue import Empty, Queue
from typing import Any

from prefect import get_run_logger
from prefect.futures import PrefectFuture

from flows.cluster.checks import check_cluster, local_cluster
from pbg_core.config import ConfigSchema
from pbg_core.errors import ClusterError, MachineLost
from pbg_core.session.iterations import Iteration
from tasks.artifacts import update_progress
from tasks.cluster_buckets import train_bucket_on
from tasks.cluster_sessions import (
    ClusterRun,
    abandon_bucket,
    assign_bucket,
    get_cluster_run,
    record_bucket,
    start_pass,
    stop_buckets,
)

WATCH_SECONDS = 1.0  # how often the loop asks who is in the cluster while buckets train


def cluster_address(config: ConfigSchema, dask_address: str | None, stack: ExitStack) -> tuple[str, bool, list[str]]:
    """The scheduler to train on, whether it runs on this machine, and its workers checked fit.

    ``dask_address`` (the flow's parameter, else the config's) is checked (reachable, enough
    workers, this package's code, workers able to start processes); without one a local
    cluster is started, and closed by ``stack``.
    """
    address = dask_address or config.dask_address
    if address:
        return address, False, list(check_cluster(address, config.num_machines).workers)
    logger = get_run_logger()
    address = stack.enter_context(local_cluster(config.num_machines))
    logger.info("started a local Dask cluster of %d workers at %s", config.num_machines, address)
    return address, True, list(check_cluster(address, config.num_machines).workers)


@dataclass
class _Pass:
    """The loop's state: buckets in flight (machine -> task), their ends, what came back."""

    done: int
    running: dict[str, PrefectFuture[Any]] = field(default_factory=dict)
    finished: Queue[str] = field(default_factory=Queue)
    trained: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any] | None] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)


def train_on_cluster(
    handle: str, iteration: Iteration, buckets_per_iteration: int, artifact: Any, total: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any] | None], int]:
    """Train every bucket of ``iteration`` on the cluster; (trained buckets, stats rows, buckets resumed)."""
    cluster = get_cluster_run(handle)
    buckets = start_pass(handle, iteration)
    resumed = max(0, buckets_per_iteration - len(buckets))
    state = _Pass(done=iteration.index * buckets_per_iteration + resumed)
    try:
        while cluster.coordinator.remaining:
            workers = cluster.workers(busy=state.running)  # reports who left, checks who joined
            if not state.failures:
                _hand_out(handle, workers, state, cluster.machine_config.num_machines)
            if not state.running:
                if state.failures:
                    break
                raise _no_worker_left(cluster, iteration)
            try:
                machine = state.finished.get(timeout=WATCH_SECONDS)
            except Empty:
                continue
            _collect(handle, machine, state, artifact, total)
    except BaseException:
        if state.running:  # interrupted, or the cluster is gone: nothing waits for the buckets in flight
            stop_buckets(handle)
        raise
    if state.failures:
        raise state.failures[0]
    return state.trained, state.rows, resumed


def _collect(handle: str, machine: str, state: _Pass, artifact: Any, total: int) -> None:
    """``machine``'s bucket task ended: record its bucket, give it back, or keep its failure."""
    future = state.running.pop(machine)
    try:
        outcome = future.result()
    except MachineLost as exc:
        bucket = abandon_bucket(handle, machine, lost=True)
        get_run_logger().warning("%s; its bucket %s goes to another worker", exc, tuple(bucket) if bucket else None)
        return
    except Exception as exc:  # noqa: BLE001 - raised by the loop, once the buckets in flight are recorded
        # (an interrupt here is no bucket's failure: it goes up, and the loop abandons the buckets in flight)
        abandon_bucket(handle, machine, lost=False)
        state.failures.append(exc)
        return
    state.rows.append(record_bucket(handle, machine, outcome))
    state.done += 1
    update_progress(artifact, state.done, total)
    state.trained.append(
        {
            "bucket": list(outcome.bucket),
            "machine": machine,
            "train": outcome.train,
            "eval_before": outcome.eval_before,
            "eval_after": outcome.eval_after,
        }
    )


def _no_worker_left(cluster: ClusterRun, iteration: Iteration) -> ClusterError:
    if cluster.scheduler_lost():
        return ClusterError(
            f"dask_address {cluster.address}: lost the Dask scheduler; the committed checkpoint and the "
            "buckets recorded so far are kept: a retry resumes from them"
        )
    members = cluster.members
    refused = "; ".join(f"{w} {why}" for w, why in sorted(members.refused.items()))
    return ClusterError(
        f"dask_address {cluster.address}: no worker left to train the {cluster.coordinator.remaining} "
        f"bucket(s) left of {iteration.label} (lost: {', '.join(sorted(members.lost)) or 'none'}"
        + (f"; refused: {refused}" if refused else "")
        + ")"
    )


def _hand_out(handle: str, workers: list[str], state: _Pass, limit: int) -> None:
    """Give each free worker (up to ``limit`` busy ones) a bucket that can start now."""
    for machine in workers:
        if len(state.running) >= limit:
            return
        if machine in state.running:
            continue
        assignment = assign_bucket(handle, machine)
        if assignment is None:
            continue
        future = train_bucket_on.submit(handle, machine, assignment)
        state.running[machine] = future
        future.add_done_callback(partial(_put, state.finished, machine))


def _put(finished: Queue[str], machine: str, _future: PrefectFuture[Any]) -> None:
    """A bucket task ended (done or failed): its machine's turn in the flow's loop."""
    finished.put(machine)
