"""A distributed run's session: the coordinator in this process, its machines on Dask workers.

``open-cluster-session`` builds the :class:`~pbg_core.distributed.coordinator.Coordinator`'s
session (it trains nothing: it holds the shared parameters and the pass's record) and registers
it like a single-machine session, so the checkpoint tasks (write, switch, preserve, remove) take
its handle unchanged. The same handle names the :class:`ClusterRun` here: the Dask client, the
run's token and the config every machine builds its own session from.

Per bucket, the flow calls :func:`assign_bucket` (the lock server's choice: a plain call, no
task), runs ``train bucket (l, r) on <worker>`` (:mod:`tasks.cluster_buckets`) and then
``record-bucket``. Which workers may get a bucket is :mod:`tasks.cluster_members`'s to say.

Closing never waits behind a bucket: :func:`stop_buckets` (the flow calls it when a pass ends
abnormally: Ctrl-C, a lost scheduler) and ``close-cluster-session`` abandon the buckets in
flight, on the workers too (:func:`tasks.machines.close_machine`); the rerun trains them again.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from distributed import Client, Future, Security

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.distributed.assignments import Assignment, Outcome
from pbg_core.distributed.coordinator import Coordinator
from pbg_core.parallel.worker_boot import default_num_workers
from pbg_core.session.build import build_session
from pbg_core.session.iterations import Iteration
from pbg_core.types import Bucket
from storage.run_stores import open_run_stores
from tasks._policies import plain_task, run_logger, storage_task
from tasks.cluster_members import Members, machine_config
from tasks.machines import close_machine
from tasks.runs import Registry, get_run
from tasks.sessions import register_session, unregister_session

# How long the scheduler may be unreachable before the run fails (Dask's client gives up
# reconnecting after its own timeout; this bounds the wait in any case).
SCHEDULER_GRACE_SECONDS = 30.0
POLL_SECONDS = 0.5
STOP_SECONDS = 10.0  # how long closing waits for the scheduler to pass on the machines' close


@dataclass
class ClusterRun:
    """A distributed run's live parts in this process.

    Attributes:
        coordinator: Hands out buckets and records them.
        client: The Dask client of the run's scheduler.
        address: The scheduler's address (for messages).
        token: Names this run's machines on the workers.
        machine_config: The config each machine builds its session from (seed fixed, 2 resident
            partitions per type, its HOGWILD worker count, no credential the workers resolve themselves).
        members: The workers admitted to the run, refused, lost.
        in_flight: Machine -> the Dask future of the bucket it trains now.
        stopping: Set when the run abandons its buckets in flight (:func:`stop_buckets`).
    """

    coordinator: Coordinator
    client: Client
    address: str
    token: str
    machine_config: ConfigSchema
    members: Members
    in_flight: dict[str, Future[Any]] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)

    def workers(self, busy: Collection[str] = ()) -> list[str]:
        """The workers that may train now (:meth:`Members.refresh`: who left and who joined is logged)."""
        live = live_workers(self.client) if self.client.status == "running" else None
        return self.members.refresh(self.client, live, busy)

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


def machine_settings(config: ConfigSchema, seed: int, machines: int, local: bool) -> ConfigSchema:
    """The config a machine builds its session from.

    The coordinator's seed (every machine must initialise a partition alike), room for one
    bucket's partitions, and on a cluster of this machine the cores shared out between the
    machines when ``workers`` is not set.
    """
    update: dict[str, Any] = {"seed": seed, "resident_partitions": 2}
    if local and config.workers is None:
        update["workers"] = max(1, default_num_workers() // machines)
    return config.model_copy(update=update)


@storage_task(name="open-cluster-session", task_run_name="open cluster session")
def open_cluster_session(run: str, address: str, local: bool, workers: list[str]) -> str:
    """Build the coordinator on the run's stores and connect to the scheduler at ``address``; returns a handle.

    ``local``: the cluster runs on this machine (its workers share its cores). ``workers``: the
    workers checked fit (:func:`flows.cluster.checks.check_cluster`); a later one is checked
    before its first bucket.
    """
    config = get_run(run).config
    coordinator_config = config.model_copy(update={"resident_partitions": 2, "workers": 1})
    session = build_session(coordinator_config, open_run_stores(config, staged=False), read_ahead=False)
    try:
        # Dask's own TLS settings of this process (flows.cluster.security), as the checks connected.
        client = Client(address, timeout=SCHEDULER_GRACE_SECONDS, set_as_default=False, security=Security())
    except BaseException:
        session.close()
        raise
    try:
        sent, credentials = machine_config(config, client, workers, address, local)
    except BaseException:
        client.close()
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
        machine_config=machine_settings(sent, session.seed, config.num_machines, local),
        members=Members(admitted=set(workers), credentials=credentials),
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


@plain_task(name="close-cluster-session", task_run_name="close cluster session")
def close_cluster_session(handle: str) -> None:
    """Close the machines on every worker (abandoning a bucket in flight), the client and the
    coordinator's session (idempotent); never waits for a bucket to finish."""
    cluster = _CLUSTER_RUNS.pop(handle)
    session = unregister_session(handle)
    try:
        if cluster is not None:
            try:
                _stop(cluster)
            finally:
                cluster.client.close(timeout=10)
    finally:
        if session is not None:
            session.close()


def stop_buckets(handle: str) -> None:
    """Abandon the run's buckets in flight: their tasks return at once, their workers stop training them.

    Their buckets are not recorded (the rerun trains them again). Also closes the run's machine on
    every worker: call it only when the run hands out no more buckets.
    """
    _stop(get_cluster_run(handle))


def _stop(cluster: ClusterRun) -> None:
    cluster.stopping.set()
    if cluster.client.status != "running":  # the scheduler is gone: there is nothing to reach
        return
    futures = list(cluster.in_flight.values())

    def close_machines() -> None:
        try:
            if futures:
                cluster.client.cancel(futures, force=True)
            cluster.client.run(close_machine, cluster.token, on_error="return")
        except Exception as exc:  # noqa: BLE001 - a lost cluster has nothing left to close
            run_logger().warning("could not close the machines on %s: %s", cluster.address, exc)

    # A scheduler that stopped answering would hold these calls for the client's whole timeout.
    closing = threading.Thread(target=close_machines, name="close-machines", daemon=True)
    closing.start()
    closing.join(STOP_SECONDS)
    if closing.is_alive():
        run_logger().warning(
            "the Dask scheduler at %s did not confirm within %g s that the run's machines are closed; a bucket "
            "still training there is not recorded, and the next bucket of another run closes them",
            cluster.address,
            STOP_SECONDS,
        )


@storage_task(name="schedule-buckets", task_run_name="schedule buckets of v{iteration.version} on the cluster")
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
        cluster.members.leave(machine)
    return cluster.coordinator.abandon(machine)


@storage_task(name="record-bucket", task_run_name="record bucket ({outcome.bucket.lhs}, {outcome.bucket.rhs})")
def record_bucket(handle: str, machine: str, outcome: Outcome) -> dict[str, Any]:
    """Add the bucket's change to the shared parameters, save them and the pass's record (durable)."""
    return get_cluster_run(handle).coordinator.complete(machine, outcome)
