"""A distributed run's session: the coordinator in this process, its machines on Dask workers.

``open-cluster-session`` builds the :class:`~pbg_core.distributed.coordinator.Coordinator`'s
session (it trains nothing: it holds the shared parameters and the pass's record) and registers
it like a single-machine session, so the checkpoint tasks (write, switch, preserve, remove) take
its handle unchanged. The same handle names the :class:`ClusterRun` here: the Dask client, the
run's token and the config every machine builds its own session from.

Per bucket, the flow calls :func:`assign_bucket` (the lock server's choice: a plain call, no
task), runs ``train bucket (l, r) on <worker>`` (a task that drives one Dask future pinned to that
worker and waits for it, never longer than the worker lives) and then ``record-bucket``.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Any

from distributed import Client, Future
from prefect import task

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.distributed.assignments import Assignment, Outcome
from pbg_core.distributed.coordinator import Coordinator
from pbg_core.errors import ClusterError, MachineLost
from pbg_core.parallel.worker_boot import default_num_workers
from pbg_core.session.build import build_session
from pbg_core.session.engine import STEP
from pbg_core.session.iterations import Iteration
from pbg_core.types import Bucket
from storage.run_stores import open_run_stores
from tasks._policies import NO_CACHE, STORAGE_RETRIES, STORAGE_RETRY_DELAYS, retry_if_transient, run_logger
from tasks.machines import close_machine, train_on_machine
from tasks.runs import Registry, get_run
from tasks.sessions import register_session, unregister_session

# How long the scheduler may be unreachable before the run fails (Dask's client gives up
# reconnecting after its own timeout; this bounds the wait in any case).
SCHEDULER_GRACE_SECONDS = 30.0
POLL_SECONDS = 0.5
LOST_AFTER_POLLS = 2  # a worker missing from two answers in a row (a second apart) is lost


@dataclass
class ClusterRun:
    """A distributed run's live parts in this process.

    Attributes:
        coordinator: Hands out buckets and records them.
        client: The Dask client of the run's scheduler.
        address: The scheduler's address (for messages).
        token: Names this run's machines on the workers.
        machine_config: The config each machine builds its session from (seed fixed, 2 resident
            partitions per type, its HOGWILD worker count).
        lost: Workers that left during the run (never given a bucket again).
    """

    coordinator: Coordinator
    client: Client
    address: str
    token: str
    machine_config: ConfigSchema
    lost: set[str] = field(default_factory=set)

    def workers(self) -> list[str]:
        """The scheduler's workers now, minus those lost during the run."""
        return sorted((live_workers(self.client) or set()) - self.lost)

    def scheduler_lost(self) -> bool:
        """Whether the client lost its scheduler (it reconnects for a while, then gives up)."""
        return self.client.status != "running" or live_workers(self.client) is None


def live_workers(client: Client) -> set[str] | None:
    """The workers the scheduler knows now; None when it cannot be asked.

    Asked directly: ``Client.scheduler_info()`` returns a cache that the client's own periodic
    refresh overwrites with a worker-less summary, so a thread reading it may see no worker.
    """
    scheduler = client.scheduler
    if scheduler is None:  # closed
        return None
    try:
        identity = client.sync(scheduler.identity, n_workers=-1, callback_timeout=POLL_SECONDS * 10)
    except (OSError, TimeoutError):
        return None
    return set(identity.get("workers", {}))


_CLUSTER_RUNS: Registry[ClusterRun] = Registry("cluster session")


def get_cluster_run(handle: str) -> ClusterRun:
    """The cluster run of a session handle (:func:`open_cluster_session`'s)."""
    return _CLUSTER_RUNS.get(handle)


def is_cluster_session(handle: str) -> bool:
    """Whether ``handle`` names a distributed run's session."""
    try:
        _CLUSTER_RUNS.get(handle)
    except LookupError:
        return False
    return True


def machine_config(config: ConfigSchema, seed: int, machines: int, local: bool) -> ConfigSchema:
    """The config a machine builds its session from.

    The coordinator's seed (every machine must initialise a partition alike), room for one
    bucket's partitions, and on a cluster of this machine the cores shared out between the
    machines when ``workers`` is not set.
    """
    update: dict[str, Any] = {"seed": seed, "resident_partitions": 2}
    if local and config.workers is None:
        update["workers"] = max(1, default_num_workers() // machines)
    return config.model_copy(update=update)


@task(
    name="open-cluster-session",
    task_run_name="open cluster session",
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)
def open_cluster_session(run: str, address: str, local: bool) -> str:
    """Build the coordinator on the run's stores and connect to the scheduler at ``address``; returns a handle.

    ``local``: the cluster runs on this machine (its workers share its cores).
    """
    config = get_run(run).config
    coordinator_config = config.model_copy(update={"resident_partitions": 2, "workers": 1})
    session = build_session(coordinator_config, open_run_stores(config, staged=False), read_ahead=False)
    try:
        client = Client(address, timeout=SCHEDULER_GRACE_SECONDS, set_as_default=False)
    except BaseException:
        session.close()
        raise
    get_run(run).stores.checkpoint.save_config(config_to_json(config))  # secrets masked
    coordinator = Coordinator(
        session,
        tree_init=config.distributed_tree_init_order,
        evaluate=config.eval_fraction > 0,
        merge=config.distributed_shared_merge,
    )
    cluster = ClusterRun(
        coordinator=coordinator,
        client=client,
        address=address,
        token=uuid.uuid4().hex,
        machine_config=machine_config(config, session.seed, config.num_machines, local),
    )
    handle = register_session(session, run, prefix="cluster")
    _CLUSTER_RUNS.put(handle, cluster)
    run_logger().info(
        "cluster session %s: coordinator of %d machines at %s, committed version %d, seed %d",
        handle,
        config.num_machines,
        address,
        session.residency.committed_version,
        session.seed,
    )
    return handle


@task(name="close-cluster-session", task_run_name="close cluster session", cache_policy=NO_CACHE)
def close_cluster_session(handle: str) -> None:
    """Close the machines on every worker, the client and the coordinator's session (idempotent)."""
    cluster = _CLUSTER_RUNS.pop(handle)
    session = unregister_session(handle)
    try:
        if cluster is not None:
            try:
                cluster.client.run(close_machine, cluster.token, on_error="return")
            except Exception as exc:  # noqa: BLE001 - a lost cluster has nothing left to close
                run_logger().warning("could not close the machines on %s: %s", cluster.address, exc)
            finally:
                cluster.client.close(timeout=10)
    finally:
        if session is not None:
            session.close()


@task(
    name="schedule-buckets",
    task_run_name="schedule buckets of v{iteration.version} on the cluster",
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)
def start_pass(handle: str, iteration: Iteration) -> list[Bucket]:
    """Open the pass on the coordinator (resuming a recorded one); the buckets left to train."""
    return get_cluster_run(handle).coordinator.start_pass(iteration)


def assign_bucket(handle: str, machine: str) -> Assignment | None:
    """The bucket the free ``machine`` trains next (locked for it), or None when none can start now."""
    return get_cluster_run(handle).coordinator.assign(machine)


def abandon_bucket(handle: str, machine: str, lost: bool) -> Bucket | None:
    """``machine``'s bucket failed, or (``lost``) the machine left: the bucket goes back to the pass."""
    cluster = get_cluster_run(handle)
    if lost:
        cluster.lost.add(machine)
    return cluster.coordinator.abandon(machine)


@task(
    name="train-bucket-on-machine",
    task_run_name="train bucket ({assignment.bucket.lhs}, {assignment.bucket.rhs}) on {machine}",
    cache_policy=NO_CACHE,
)
def train_bucket_on(handle: str, machine: str, assignment: Assignment) -> Outcome:
    """Train ``assignment`` on the Dask worker ``machine``; its log lines join this task's.

    Raises:
        MachineLost: the worker left the cluster before the bucket was done.
        ClusterError: the scheduler stopped answering.
    """
    cluster = get_cluster_run(handle)
    future = cluster.client.submit(
        train_on_machine,
        cluster.token,
        cluster.machine_config,
        assignment,
        workers=[machine],
        allow_other_workers=False,
        pure=False,
        key=f"train-bucket-{assignment.bucket.lhs}-{assignment.bucket.rhs}-v{assignment.iteration.version}-a{assignment.area}",
    )
    try:
        outcome = _wait(cluster, future, machine)
    finally:
        future.release()
    logger = run_logger()
    for line, step in outcome.logs:
        logger.info("%s", line, extra=STEP if step else None)
    return outcome


@task(
    name="record-bucket",
    task_run_name="record bucket ({outcome.bucket.lhs}, {outcome.bucket.rhs})",
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)
def record_bucket(handle: str, machine: str, outcome: Outcome) -> dict[str, Any]:
    """Add the bucket's change to the shared parameters, save them and the pass's record (durable)."""
    return get_cluster_run(handle).coordinator.complete(machine, outcome)


def _wait(cluster: ClusterRun, future: Future[Outcome], machine: str) -> Outcome:
    """The future's result, watching that its worker and the scheduler are still there."""
    unreachable_since: float | None = None
    missing = 0  # consecutive polls that did not find the worker
    while True:
        if future.status in ("finished", "error"):
            return future.result()  # an error: the machine's, raised here
        known = live_workers(cluster.client) if cluster.client.status == "running" else None
        if known is None or future.status == "cancelled":
            unreachable_since = unreachable_since or time.monotonic()
            waited = time.monotonic() - unreachable_since
            if cluster.client.status in ("closing", "closed") or waited > SCHEDULER_GRACE_SECONDS:
                raise ClusterError(
                    f"dask_address {cluster.address}: lost the Dask scheduler while {machine} trained a bucket; "
                    "the committed checkpoint and the buckets recorded so far are kept: a retry resumes from them"
                )
            time.sleep(POLL_SECONDS)
            continue
        unreachable_since = None
        if machine in known:
            missing = 0
        else:
            missing += 1
            if missing >= LOST_AFTER_POLLS:
                future.cancel()
                raise MachineLost(f"Dask worker {machine} left the cluster while it trained a bucket")
        try:
            return future.result(timeout=POLL_SECONDS)
        except TimeoutError:
            continue
        except CancelledError:  # the client lost the scheduler: the loop's first branch decides
            continue
