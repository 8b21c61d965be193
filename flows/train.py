"""The ``pbg`` training flow: plan, then one subflow per (epoch, edge path, edge chunk).

Each iteration subflow trains every bucket (swap partitions -> load edges ->
evaluate before -> HOGWILD train -> evaluate after -> save its progress) and then
commits a new checkpoint version in four retryable steps. A rerun of the same config
resumes after the last committed version and, inside the interrupted pass, after the
last saved bucket; raising ``num_epochs`` extends a finished run. With a ``validation`` section the
iteration ending every N-th epoch also validates its version, moves ``best.json`` and may end the
run early (:mod:`tasks.validation_steps`; docs/quality.md, "Validation and early stopping").

Scheduled retraining is a flow of its own, ``pbg-retrain`` (:mod:`flows.retrain`), which calls this
one as a subflow; a ``pbg`` run given a ``retrain`` parameter is refused in one line naming it
(:class:`TrainingFlow`).
"""

# No `from __future__ import annotations`: Prefect validates the parameters of a flow run
# started by `pbg serve` against the annotations, and string annotations were not resolved
# there ("ConfigSchema is not fully defined").
import contextvars
import inspect
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import partial, wraps
from typing import Annotated, Any
from uuid import UUID

from prefect import Flow, flow, get_run_logger
from prefect.exceptions import ParameterTypeError
from prefect.flow_runs import pause_flow_run
from prefect.runtime import flow_run
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from pydantic import BaseModel, Field

from flows.cluster.training import cluster_address, train_on_cluster
from flows.prefect_host.interrupts import cancel_on_interrupt, note_position, stop_if_signalled
from flows.prefect_host.run_logs import forward_engine_logs
from flows.run_names import run_name
from pbg_core.config import ConfigSchema
from pbg_core.session.iterations import Iteration
from storage.stats_report import version_progress
from tasks.artifacts import publish_iteration_table, publish_summary, start_progress, update_progress
from tasks.buckets import (
    evaluate_bucket,
    finish_bucket,
    load_edges,
    schedule_buckets,
    swap_partitions,
    train_bucket,
)
from tasks.by_name import check_checkpoint_names, remove_start_by_name, start_by_name
from tasks.checkpoint import (
    preserve_version,
    remove_leftovers,
    remove_old_version,
    switch_version,
    write_checkpoint,
)
from tasks.cluster_sessions import close_cluster_session, is_cluster_session, open_cluster_session
from tasks.config import resolve_config
from tasks.lease import acquire_lease, release_lease
from tasks.new_rows import prepare_new_rows, starts_new_rows
from tasks.plan import TrainingPlan, check_inputs, plan_training
from tasks.runs import opened_run
from tasks.sessions import close_training_session, open_training_session
from tasks.validation_steps import (
    check_validation,
    is_due,
    record_best,
    stopped_reason,
    validate_version,
    validation_note,
)


class RunProgress(BaseModel):
    """The run's progress artifact and the bucket counts its percentage is computed from."""

    artifact_id: UUID | None = None
    total: int = 1
    buckets_per_iteration: int = 1


@flow(name="pbg-iteration", flow_run_name="{iteration.label}", validate_parameters=False)
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def train_iteration(
    handle: str, iteration: Iteration, evaluate: bool, progress: RunProgress | None = None, validate: bool = False
) -> dict[str, Any]:
    """Train every bucket of one iteration, then commit it as a new checkpoint version (validated if ``validate``)."""
    return _iteration_steps(handle, iteration, evaluate, progress or RunProgress(), validate)


def _iteration_steps(
    handle: str, iteration: Iteration, evaluate: bool, progress: RunProgress, validate: bool = False
) -> dict[str, Any]:
    """The iteration's tasks: train every bucket (here, or on the cluster's machines); then commit.

    A validated version is ranked before its commit (its row survives a kill right after it) and
    best.json moves after it (it names committed versions only): tasks/validation_steps.py."""
    note_position(iteration.label)  # for the resume hint if the command is interrupted
    if is_cluster_session(handle):
        per = progress.buckets_per_iteration
        trained, rows, resumed = train_on_cluster(handle, iteration, per, progress.artifact_id, progress.total)
    else:
        trained, rows, resumed = _train_buckets(handle, iteration, evaluate, progress)
    write_checkpoint(handle, iteration)
    validated = validate_version(handle, iteration) if validate else None
    switch_version(handle, iteration)
    decision = record_best(handle, iteration) if validated is not None else {}
    preserve_version(handle, iteration)
    remove_old_version(handle, iteration)
    return {
        "version": iteration.version,
        "buckets": trained,
        "rows": rows,
        "resumed": resumed,
        "stop": decision.get("stop"),  # early stopping: the run ends after this iteration
        "flow_run_id": flow_run.id,
    }  # the subflow's: its table artifact is posted there


def _train_buckets(
    handle: str, iteration: Iteration, evaluate: bool, progress: RunProgress
) -> tuple[list[dict[str, Any]], list[dict[str, Any] | None], int]:
    """Per bucket: swap, load, evaluate, train, evaluate, save; (trained, stats rows, buckets resumed)."""
    buckets = schedule_buckets(handle, iteration)
    resumed = max(0, progress.buckets_per_iteration - len(buckets))  # done by an interrupted attempt
    done = iteration.index * progress.buckets_per_iteration + resumed
    trained: list[dict[str, Any]] = []
    rows: list[dict[str, Any] | None] = []
    for bucket in buckets:
        stop_if_signalled()  # a run in a tuning trial's thread: Ctrl-C reaches the main thread only
        swap_partitions(handle, bucket)
        load_edges(handle, bucket)
        before = evaluate_bucket(handle, "before") if evaluate else None
        stats = train_bucket(handle)
        after = evaluate_bucket(handle, "after") if evaluate else None
        rows.append(finish_bucket(handle).get("row"))
        done += 1
        update_progress(progress.artifact_id, done, progress.total)
        trained.append({"bucket": list(bucket), "train": stats, "eval_before": before, "eval_after": after})
    return trained, rows, resumed


RETRAIN_MOVED = (
    "retrain: the pbg flow trains one checkpoint and takes no `retrain` parameter; scheduled retraining is "
    "the flow pbg-retrain: run its deployment pbg-retrain/retrain, or `pbg retrain CONFIG` (docs/retraining.md)"
)


class TrainingFlow(Flow[..., dict[str, Any]]):
    """The ``pbg`` flow, which says where a run given the former ``retrain`` parameter belongs.

    A deployment run's parameters reach the flow unchecked against its signature (the server
    checks only the schema's fields), and the engine binds them to ``self.fn`` before
    :meth:`validate_parameters`, refusing an unknown one with the signature's list. So ``self.fn``
    takes ``retrain`` (refused unless None: an older deployment's default) while the UI's schema,
    made from the real function, does not show it.
    """

    def __init__(self, fn: Callable[..., dict[str, Any]], **options: Any) -> None:
        super().__init__(fn=fn, **options)  # the parameter schema: the real signature's
        self.fn = _taking_retrain(fn)

    def validate_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        """Refuse ``retrain`` in one line (:data:`RETRAIN_MOVED`), then Prefect's validation."""
        if parameters.get("retrain") is not None:
            raise ParameterTypeError(RETRAIN_MOVED)
        return super().validate_parameters({k: v for k, v in parameters.items() if k != "retrain"})


def _taking_retrain(fn: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """``fn`` with a keyword-only ``retrain=None`` that it refuses when given a value."""

    @wraps(fn)
    def call(*args: Any, retrain: Any = None, **kwargs: Any) -> dict[str, Any]:
        if retrain is not None:
            raise ParameterTypeError(RETRAIN_MOVED)
        return fn(*args, **kwargs)

    signature = inspect.signature(fn)
    extra = inspect.Parameter("retrain", inspect.Parameter.KEYWORD_ONLY, default=None)
    call.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])  # type: ignore[attr-defined]
    return call


def _training_flow(fn: Callable[..., dict[str, Any]]) -> TrainingFlow:
    """``@flow(name="pbg", ...)``, as a :class:`TrainingFlow` (the function keeps its name: a served
    deployment's entrypoint is ``flows.train.pbg``)."""
    return TrainingFlow(fn=fn, name="pbg", flow_run_name=run_name("train"))


@_training_flow
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def pbg(
    config: ConfigSchema | None = None,
    config_url: str | None = None,
    overrides: list[str] | None = None,
    pause_every: Annotated[int, Field(ge=0)] = 0,
    pause_timeout_seconds: Annotated[int, Field(ge=1)] = 3600,
    dask_address: str | None = None,
) -> dict[str, Any]:
    """Train graph embeddings as PyTorch-BigGraph does, resumable at every committed version.

    Args:
        config: The training config (PBG's schema), inline.
        config_url: A JSON or YAML config file (local path, file:// or s3://) instead of `config`.
        overrides: PBG-style `key=value` overrides with dotted paths, e.g. `num_epochs=10`.
            Credentials are refused here (parameters are recorded in clear): use the AWS_*
            environment variables of the worker, or `storage_options` in a config file.
        pause_every: Pause the run after every N committed iterations (0: never); resume it
            from the UI's Resume button. The process, its HOGWILD workers and the lease stay up.
        pause_timeout_seconds: A pause not resumed within this time fails the run (the
            committed checkpoint stays; a retry resumes from it).
        dask_address: The Dask scheduler to train on when the config's num_machines > 1
            (tcp://host:8786, or tls://host:8786 with Dask's TLS settings); overrides the config's. None and none in the config: a local
            cluster of num_machines worker processes. See docs/distributed.md.
    """
    forward_engine_logs()
    cluster = [f"dask_address={dask_address}"] if dask_address else []
    resolved = resolve_config(config, config_url, [*(overrides or []), *cluster])
    results: list[dict[str, Any]] = []
    with opened_run(resolved) as run:  # the run's stores, opened once: the tasks below take this handle
        chunks = check_inputs(run)  # before anything is written: nothing here depends on the checkpoint
        if resolved.validation is not None:
            check_validation(run)  # the validation edges are there, its candidates can be drawn
        lease = acquire_lease(run)  # a second run on this checkpoint stops here, naming the holder
        try:
            plan = plan_training(run, chunks)  # under the lease: what is committed now
            prepare_start(run, resolved, plan)
            stopped = stopped_reason(resolved, plan.committed_version) if plan.remaining else None
            if stopped is not None:  # a rerun of a run that stopped early: the same rows, the same decision
                get_run_logger().info(
                    "%s: nothing to train (a larger patience, or -p early_stopping=null, goes on)", stopped
                )
            elif plan.remaining:
                results = _train_remaining(run, resolved, plan, pause_every, pause_timeout_seconds)
                remove_start_by_name(run)  # read only until the first commit
                stopped = results[-1].get("stop") if results else None
        finally:
            release_lease(lease)
        final = plan.committed_version + len(results)
        publish_summary(run, final, plan.total_iterations, validation=validation_note(run, stopped))
    done = version_progress(final, plan.total_iterations)
    get_run_logger().info("checkpoint %s is at %s", resolved.checkpoint_path, done)
    outcome = {"checkpoint_path": resolved.checkpoint_path, "version": final, "iterations": results}
    return outcome | ({"stopped": stopped} if stopped else {})


def prepare_start(run: str, config: ConfigSchema, plan: TrainingPlan) -> None:
    """Before the session: refuse rows that now mean other entities, clear what a killed run left,
    record the names trained and start init_path's rows by name (and new entities' rows).

    Idempotent: ``pbg-retrain`` runs it before its baseline (the grown starting point), and the
    ``pbg`` subflow then finds it done (a retry of either runs it again too)."""
    if plan.remaining:
        check_checkpoint_names(run, plan.committed_version)  # before anything is written or removed
    # Leftovers of a run killed while removing or committing.
    remove_leftovers(run, plan.committed_version, plan.num_edge_chunks)
    if plan.remaining:
        start_by_name(run, plan.committed_version)  # the names record; init_path's rows matched by name
    if _starts_new_rows(config, plan):
        prepare_new_rows(run)  # neighbor means of the entities init_path lacks


def _train_remaining(
    run: str, config: ConfigSchema, plan: TrainingPlan, pause_every: int, pause_timeout_seconds: int
) -> list[dict[str, Any]]:
    """Run the plan's remaining iterations in one session; one table artifact per iteration."""
    per = plan.buckets_per_iteration
    total = plan.total_iterations * per
    artifact = start_progress(plan.committed_version * per, total, f"buckets trained of {config.checkpoint_path}")
    progress = RunProgress(artifact_id=artifact, total=total, buckets_per_iteration=per)
    stack = ExitStack()  # a local Dask cluster, if this run starts one
    try:
        handle = _open_session(run, config, stack)
    except BaseException:
        stack.close()
        raise
    try:
        results = _run_in_order(handle, config, plan, progress, (pause_every, pause_timeout_seconds))
    finally:
        with stack:
            if config.num_machines > 1:
                close_cluster_session(handle)
            else:
                close_training_session(handle)
    return results


def _run_in_order(
    handle: str, config: ConfigSchema, plan: TrainingPlan, progress: RunProgress, pause: tuple[int, int]
) -> list[dict[str, Any]]:
    """One subflow per remaining iteration, each created once the previous one has ended; pauses where
    ``pause_every`` says, and ends after an iteration whose validation stops the run (early stopping).
    ``pause``: (every, timeout seconds).

    So the run's timeline shows what happened: one iteration Running at a time, in order. The
    subflows run without flow-run heartbeats (:func:`_subflow_heartbeats_off`)."""
    pause_every, pause_timeout_seconds = pause
    results: list[dict[str, Any]] = []
    # Each iteration's table is posted by a thread of its own while the next iteration runs (one
    # API call, ~20 ms); leaving the block waits for the last one.
    with _subflow_heartbeats_off(), ThreadPoolExecutor(1, thread_name_prefix="pbg-tables") as tables:
        for iteration in plan.remaining:
            validate = is_due(config.validation, iteration)
            result = train_iteration(handle, iteration, config.eval_fraction > 0, progress, validate)
            post = partial(publish_iteration_table, iteration, result["rows"], result["resumed"], config)
            tables.submit(contextvars.copy_context().run, post, result["flow_run_id"])
            results.append(result)
            if result.get("stop"):
                break  # early stopping (logged by record-best): the run ends Completed after this version
            if _pause_due(pause_every, iteration, plan.total_iterations):
                get_run_logger().info(
                    "paused after committing v%d (pause_every=%d): resume it from the UI",
                    iteration.version,
                    pause_every,
                )
                pause_flow_run(timeout=pause_timeout_seconds, poll_interval=2, key=f"after-v{iteration.version}")
    return results


@contextmanager
def _subflow_heartbeats_off() -> Iterator[None]:
    """Flow runs started inside start no heartbeat thread; the ``pbg`` run keeps the one it started.

    A flow run's heartbeat thread sleeps in 1 s steps, and a sync subflow joins it as it ends: up to
    a second between two iterations (docs/prefect-costs.md). Heartbeats let a server mark a run whose
    process died as crashed; the ``pbg`` run's own thread, started before this with the interval it
    read then, goes on sending them, and a subflow dies with its parent's process (its parent's
    crash is what the UI and the automations show). Embedded runs have heartbeats off already."""
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def _open_session(run: str, config: ConfigSchema, stack: ExitStack) -> str:
    """The run's training session: in this process, or a coordinator of ``num_machines`` Dask workers."""
    if config.num_machines == 1:
        return open_training_session(run)
    address, local, workers = cluster_address(config, None, stack)
    return open_cluster_session(run, address, local, workers)


def _starts_new_rows(config: ConfigSchema, plan: TrainingPlan) -> bool:
    """Whether rows init_path lacks start at their neighbors' mean: something to train, and asked for."""
    return bool(plan.remaining) and starts_new_rows(config, plan.committed_version)


def _pause_due(pause_every: int, iteration: Iteration, total_iterations: int) -> bool:
    """Pause after every ``pause_every``-th version, never after the last one."""
    return pause_every > 0 and iteration.version % pause_every == 0 and iteration.version < total_iterations
