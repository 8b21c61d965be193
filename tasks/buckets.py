"""Per-bucket training steps, each a thin task over the live session.

The HOGWILD step must be called directly from the flow (not ``.submit()``):
forking worker processes from a task-runner thread kills them on CPython 3.11.
"""

from __future__ import annotations

from typing import Any

from pbg_core.session.iterations import Iteration
from pbg_core.types import Bucket
from storage.disk_checks import check_before_bucket_save
from tasks._policies import plain_task, storage_task
from tasks.sessions import get_session, session_run


@storage_task(name="schedule-buckets", task_run_name="schedule buckets of v{iteration.version}")
def schedule_buckets(handle: str, iteration: Iteration) -> list[Bucket]:
    """The (seeded) bucket order of this pass, minus the buckets an interrupted run finished."""
    return get_session(handle).schedule_buckets(iteration)


@storage_task(name="swap-partitions", task_run_name="swap partitions ({bucket[0]}, {bucket[1]})")
def swap_partitions(handle: str, bucket: Bucket) -> dict[str, float]:
    """Save the partitions leaving memory and load the ones ``bucket`` needs (once the disk has room)."""
    session = get_session(handle)
    check_before_bucket_save(session, session_run(handle).config.checkpoint_path)
    return session.swap_partitions(Bucket(*bucket))


@storage_task(name="load-edges", task_run_name="load edges ({bucket[0]}, {bucket[1]})")
def load_edges(handle: str, bucket: Bucket) -> dict[str, int]:
    """Load this iteration's chunk of ``bucket`` and split off the eval holdout."""
    return get_session(handle).load_edges(Bucket(*bucket))


@plain_task(name="evaluate-bucket", task_run_name="evaluate {phase}")
def evaluate_bucket(handle: str, phase: str) -> dict[str, Any] | None:
    """Rank the held-out edges ``before`` or ``after`` training the bucket."""
    return get_session(handle).evaluate(phase)


@plain_task(name="train-bucket", task_run_name="train bucket (HOGWILD)")
def train_bucket(handle: str) -> dict[str, Any]:
    """HOGWILD training of the loaded bucket over the session's worker pool."""
    return get_session(handle).train()


@storage_task(name="finish-bucket", task_run_name="save bucket progress")
def finish_bucket(handle: str) -> dict[str, Any]:
    """Save the partitions and model the bucket changed, then record it as done (durable; once the disk has room)."""
    session = get_session(handle)
    check_before_bucket_save(session, session_run(handle).config.checkpoint_path)
    return session.finish_bucket()
