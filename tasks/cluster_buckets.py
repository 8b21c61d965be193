"""One bucket of a distributed run on one Dask worker: the ``train bucket (l, r) on <worker>`` task.

The task submits the bucket to its worker, pinned there, and waits for it, never longer than
the worker and the scheduler live: a worker missing from two answers of the scheduler in a row
(a second apart) is lost (:class:`~pbg_core.errors.MachineLost`: the bucket goes to another
worker), a scheduler unreachable for :data:`~tasks.cluster_sessions.SCHEDULER_GRACE_SECONDS`
fails the run, and a run that closes meanwhile (:func:`~tasks.cluster_sessions.stop_buckets`)
abandons the bucket at once.

A transient storage error of the bucket (an S3 outage, throttling: ``tasks/_policies.py``) is
retried as every storage step of a single machine is, with the same policy: the same bucket,
same progress area, on the same worker, which reads its partitions again from their last
recorded saves (a machine forgets what it held after any failure). Any other error is the
bucket's failure: the flow stops handing out buckets and fails once those in flight end.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import CancelledError

from distributed import Future

from pbg_core.distributed.assignments import Assignment, Outcome
from pbg_core.errors import BucketAbandoned, ClusterError, MachineLost
from pbg_core.session.engine import STEP
from tasks._policies import run_logger, storage_task
from tasks.cluster_sessions import POLL_SECONDS, SCHEDULER_GRACE_SECONDS, ClusterRun, get_cluster_run, live_workers
from tasks.machines import train_on_machine

LOST_AFTER_POLLS = 2  # a worker missing from two answers in a row (a second apart) is lost


@storage_task(
    name="train-bucket-on-machine",
    task_run_name="train bucket ({assignment.bucket.lhs}, {assignment.bucket.rhs}) on {machine}",
)
def train_bucket_on(handle: str, machine: str, assignment: Assignment) -> Outcome:
    """Train ``assignment`` on the Dask worker ``machine``; its log lines join this task's.

    Raises:
        MachineLost: the worker left the cluster before the bucket was done.
        BucketAbandoned: the run closed meanwhile.
        ClusterError: the scheduler stopped answering.
        TransientStorageError: the worker's storage failed, retryably (retried here).
    """
    cluster = get_cluster_run(handle)
    bucket = assignment.bucket
    if cluster.stopping.is_set():
        raise BucketAbandoned(f"bucket {tuple(bucket)} not started: the run is closing")
    future = cluster.client.submit(
        train_on_machine,
        cluster.token,
        cluster.machine_config,
        assignment,
        workers=[machine],
        allow_other_workers=False,
        pure=False,
        # Unique per attempt: a retry must not find the failed attempt's result under its key.
        key=f"train-bucket-{bucket.lhs}-{bucket.rhs}-v{assignment.iteration.version}-a{assignment.area}-"
        f"{uuid.uuid4().hex[:8]}",
    )
    cluster.in_flight[machine] = future
    try:
        outcome = _wait(cluster, future, machine)
    finally:
        cluster.in_flight.pop(machine, None)
        future.release()
    logger = run_logger()
    for line, step in outcome.logs:
        logger.info("%s", line, extra=STEP if step else None)
    return outcome


def _wait(cluster: ClusterRun, future: Future[Outcome], machine: str) -> Outcome:
    """The future's result, watching that its worker and the scheduler are still there."""
    unreachable_since: float | None = None
    missing = 0  # consecutive polls that did not find the worker
    while True:
        if cluster.stopping.is_set():
            raise BucketAbandoned(f"the bucket on {machine} is abandoned: the run is closing")
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
