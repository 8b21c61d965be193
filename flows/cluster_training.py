"""A pass of a distributed run: the flow hands buckets to Dask workers as PBG's lock server does.

Inside an iteration subflow, :func:`train_on_cluster` keeps every machine busy: whenever one
is free it asks the coordinator for a bucket none of whose partitions is held elsewhere
(:func:`tasks.cluster_sessions.assign_bucket`), submits ``train bucket (l, r) on <worker>``
(a task on the flow's thread pool driving one Dask future pinned to that worker), and when a
bucket comes back, ``record-bucket`` makes it durable before its locks are freed.

A worker lost mid-bucket (killed, out of memory, its machine gone) gives its bucket back: the
next free worker trains it from its partitions' last saved state. Any other failure stops
handing out buckets; the ones in flight finish and are recorded, then the first error fails
the iteration (a retry resumes after the recorded buckets).

:func:`cluster_address` is where the cluster comes from: ``dask_address`` (checked first),
else a ``distributed.LocalCluster`` of ``num_machines`` worker processes on this machine.
"""

from __future__ import annotations

from contextlib import ExitStack
from functools import partial
from queue import Queue
from typing import Any

from prefect import get_run_logger
from prefect.futures import PrefectFuture

from flows.dask_cluster import check_cluster, local_cluster
from pbg_core.config import ConfigSchema
from pbg_core.errors import ClusterError, MachineLost
from pbg_core.session.iterations import Iteration
from tasks.artifacts import update_progress
from tasks.cluster_sessions import (
    abandon_bucket,
    assign_bucket,
    get_cluster_run,
    record_bucket,
    start_pass,
    train_bucket_on,
)


def cluster_address(config: ConfigSchema, dask_address: str | None, stack: ExitStack) -> tuple[str, bool]:
    """The scheduler to train on and whether it runs on this machine.

    ``dask_address`` (the flow's parameter, else the config's) is checked (reachable, enough
    workers, this package's version, workers able to start processes); without one a local
    cluster is started, and closed by ``stack``.
    """
    address = dask_address or config.dask_address
    if address:
        check_cluster(address, config.num_machines)
        return address, False
    logger = get_run_logger()
    address = stack.enter_context(local_cluster(config.num_machines))
    logger.info("started a local Dask cluster of %d workers at %s", config.num_machines, address)
    return address, True


def train_on_cluster(
    handle: str, iteration: Iteration, buckets_per_iteration: int, artifact: Any, total: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any] | None], int]:
    """Train every bucket of ``iteration`` on the cluster; (trained buckets, stats rows, buckets resumed)."""
    logger = get_run_logger()
    cluster = get_cluster_run(handle)
    buckets = start_pass(handle, iteration)
    resumed = max(0, buckets_per_iteration - len(buckets))
    done = iteration.index * buckets_per_iteration + resumed
    finished: Queue[str] = Queue()
    running: dict[str, PrefectFuture[Any]] = {}
    trained: list[dict[str, Any]] = []
    rows: list[dict[str, Any] | None] = []
    failures: list[BaseException] = []
    limit = cluster.machine_config.num_machines
    while cluster.coordinator.remaining:
        if not failures:
            _hand_out(handle, running, finished, limit)
        if not running:
            if failures:
                break
            if cluster.scheduler_lost():
                raise ClusterError(
                    f"dask_address {cluster.address}: lost the Dask scheduler; the committed checkpoint and the "
                    "buckets recorded so far are kept: a retry resumes from them"
                )
            raise ClusterError(
                f"dask_address {cluster.address}: no worker left to train the {cluster.coordinator.remaining} "
                f"bucket(s) left of {iteration.label} (lost: {', '.join(sorted(cluster.lost)) or 'none'})"
            )
        machine = finished.get()
        future = running.pop(machine)
        try:
            outcome = future.result()
        except MachineLost as exc:
            bucket = abandon_bucket(handle, machine, lost=True)
            logger.warning("%s; its bucket %s goes to another worker", exc, tuple(bucket) if bucket else None)
            continue
        except BaseException as exc:  # noqa: BLE001 - raised below, once the buckets in flight are recorded
            abandon_bucket(handle, machine, lost=False)
            failures.append(exc)
            continue
        row = record_bucket(handle, machine, outcome)
        rows.append(row)
        done += 1
        update_progress(artifact, done, total)
        trained.append(
            {
                "bucket": list(outcome.bucket),
                "machine": machine,
                "train": outcome.train,
                "eval_before": outcome.eval_before,
                "eval_after": outcome.eval_after,
            }
        )
    if failures:
        raise failures[0]
    return trained, rows, resumed


def _hand_out(handle: str, running: dict[str, PrefectFuture[Any]], finished: Queue[str], limit: int) -> None:
    """Give each free worker (up to ``limit`` busy ones) a bucket that can start now."""
    cluster = get_cluster_run(handle)
    for machine in cluster.workers():
        if len(running) >= limit:
            return
        if machine in running:
            continue
        assignment = assign_bucket(handle, machine)
        if assignment is None:
            continue
        future = train_bucket_on.submit(handle, machine, assignment)
        running[machine] = future
        future.add_done_callback(partial(_put, finished, machine))


def _put(finished: Queue[str], machine: str, _future: PrefectFuture[Any]) -> None:
    """A bucket task ended (done or failed): its machine's turn in the flow's loop."""
    finished.put(machine)
