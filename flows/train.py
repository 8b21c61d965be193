"""The ``pbg`` training flow: plan, then one subflow per (epoch, edge path, edge chunk).

Each iteration subflow trains every bucket (swap partitions -> load edges ->
evaluate before -> HOGWILD train -> evaluate after -> save its progress) and then
commits a new checkpoint version in four retryable steps. A rerun of the same config
resumes after the last committed version and, inside the interrupted pass, after the
last saved bucket; raising ``num_epochs`` extends a finished run.
"""

# No `from __future__ import annotations`: Prefect validates the parameters of a flow run
# started by `pbg serve` against the annotations, and string annotations were not resolved
# there ("ConfigSchema is not fully defined").
from contextlib import ExitStack
from functools import partial
from typing import Annotated, Any
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.flow_runs import pause_flow_run
from prefect.runtime import flow_run
from pydantic import BaseModel, Field

from flows.cluster.training import cluster_address, train_on_cluster
from flows.pipeline import SubflowPipeline, run_body
from flows.prefect_host.interrupts import cancel_on_interrupt, note_position
from flows.prefect_host.run_logs import forward_engine_logs
from pbg_core.config import ConfigSchema
from pbg_core.session.iterations import Iteration
from storage.stats_report import version_progress
from tasks.arrivals import Received
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
from tasks.retrain import (
    acquire_retrain_lease,
    finish_retrain,
    latest_run,
    nothing_new,
    prepare_retrain,
    receive_arrivals,
    run_key_for,
)
from tasks.retrain_gate import GateFailed, evaluate_holdout, judge_gate, unpromoted_message
from tasks.retrain_options import RetrainOptions
from tasks.runs import opened_run
from tasks.sessions import close_training_session, open_training_session


class RunProgress(BaseModel):
    """The run's progress artifact and the bucket counts its percentage is computed from."""

    artifact_id: UUID | None = None
    total: int = 1
    buckets_per_iteration: int = 1


@flow(name="pbg-iteration", flow_run_name="{iteration.label}", validate_parameters=False)
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def train_iteration(
    handle: str, iteration: Iteration, evaluate: bool, progress: RunProgress | None = None
) -> dict[str, Any]:
    """Train every bucket of one iteration, then commit it as a new checkpoint version."""
    # In the `pbg` flow the body runs in the flow's own thread, after the previous iteration's
    # (flows/pipeline.py); called on its own, right here.
    return run_body(_iteration_steps, handle, iteration, evaluate, progress or RunProgress())  # type: ignore[return-value]  # a Cancelled state: Prefect's flow engine takes it as the run's final state


def _iteration_steps(handle: str, iteration: Iteration, evaluate: bool, progress: RunProgress) -> dict[str, Any]:
    """The iteration's tasks: train every bucket (here, or on the cluster's machines); then commit."""
    note_position(iteration.label)  # for the resume hint if the command is interrupted
    if is_cluster_session(handle):
        per = progress.buckets_per_iteration
        trained, rows, resumed = train_on_cluster(handle, iteration, per, progress.artifact_id, progress.total)
    else:
        trained, rows, resumed = _train_buckets(handle, iteration, evaluate, progress)
    write_checkpoint(handle, iteration)
    switch_version(handle, iteration)
    preserve_version(handle, iteration)
    remove_old_version(handle, iteration)
    return {
        "version": iteration.version,
        "buckets": trained,
        "rows": rows,
        "resumed": resumed,
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


def _run_name() -> str:
    """``train <what>``: the config file's name, else the checkpoint directory's."""
    params = flow_run.parameters or {}
    config = params.get("config")
    url = params.get("config_url")
    if url:
        what = str(url).rstrip("/").rsplit("/", 1)[-1]
    elif config is not None:
        path = config.get("checkpoint_path") if isinstance(config, dict) else getattr(config, "checkpoint_path", "")
        what = str(path).rstrip("/").rsplit("/", 1)[-1] or "inline config"
    else:
        what = "(no config)"
    return f"train {what}"


@flow(name="pbg", flow_run_name=_run_name)
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def pbg(
    config: ConfigSchema | None = None,
    config_url: str | None = None,
    overrides: list[str] | None = None,
    retrain: RetrainOptions | None = None,
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
        retrain: Scheduled retraining (docs/retraining.md): each flow run trains into its own
            directory under `checkpoint_path`, from the latest promoted run; `incoming` imports
            new edge lists first; `min_mrr` / `max_mrr_drop` gate the promotion (latest.json).
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
    if retrain is None:
        return _train(resolved, resolved, None, None, pause_every, pause_timeout_seconds)
    root = acquire_retrain_lease(resolved)  # a second retraining run on this root stops here, naming the holder
    try:
        run_config, arrivals = _start_retrain(resolved, retrain)  # a directory of its own, the same for every retry
        if arrivals is not None and arrivals.nothing_new:
            return nothing_new(resolved, retrain)  # skipped, or failed (retrain.on_no_new_data)
        return _train(run_config, resolved, retrain, arrivals, pause_every, pause_timeout_seconds)
    finally:
        release_lease(root)


def _train(
    run_config: ConfigSchema,
    resolved: ConfigSchema,
    retrain: RetrainOptions | None,
    arrivals: Received | None,
    pause_every: int,
    pause_timeout_seconds: int,
) -> dict[str, Any]:
    """Train ``run_config`` under its checkpoint's lease; with ``retrain``, judge the gate and promote."""
    results: list[dict[str, Any]] = []
    with opened_run(run_config) as run:  # the run's stores, opened once: the tasks below take this handle
        chunks = check_inputs(run)  # before anything is written: nothing here depends on the checkpoint
        lease = acquire_lease(run)  # a second run on this checkpoint stops here, naming the holder
        try:
            plan = plan_training(run, chunks)  # under the lease: what is committed now
            _prepare_start(run, run_config, plan)
            if arrivals is not None and retrain is not None and retrain.gated:
                evaluate_holdout(run, "baseline")  # the previous model, grown, before any training
            if plan.remaining:
                results = _train_remaining(run, run_config, plan, pause_every, pause_timeout_seconds)
                remove_start_by_name(run)  # read only until the first commit
        finally:
            release_lease(lease)
        final = plan.committed_version + len(results)
        gate = _judge_and_promote(run, resolved, retrain, arrivals) if retrain is not None else None
        publish_summary(run, final, plan.total_iterations, gate)
    if gate is not None and gate.get("gate") == "failed":
        raise GateFailed(unpromoted_message(gate, latest_run(resolved)))  # the flow run ends Failed
    done = version_progress(final, plan.total_iterations)
    get_run_logger().info("checkpoint %s is at %s", run_config.checkpoint_path, done)
    return {"checkpoint_path": run_config.checkpoint_path, "version": final, "iterations": results, "gate": gate}


def _prepare_start(run: str, config: ConfigSchema, plan: TrainingPlan) -> None:
    """Before the session: refuse rows that now mean other entities, clear what a killed run left,
    record the names trained and start init_path's rows by name (and new entities' rows)."""
    if plan.remaining:
        check_checkpoint_names(run, plan.committed_version)  # before anything is written or removed
    # Leftovers of a run killed while removing or committing.
    remove_leftovers(run, plan.committed_version, plan.num_edge_chunks)
    if plan.remaining:
        start_by_name(run, plan.committed_version)  # the names record; init_path's rows matched by name
    if _starts_new_rows(config, plan):
        prepare_new_rows(run)  # neighbor means of the entities init_path lacks


def _start_retrain(config: ConfigSchema, retrain: RetrainOptions) -> tuple[ConfigSchema, Received | None]:
    """The run's own config; with ``incoming``, first import what arrived (the run's new data)."""
    run_key = run_key_for(str(flow_run.id), flow_run.scheduled_start_time)
    arrivals = None
    if retrain.incoming is not None:
        arrivals = receive_arrivals(config, retrain, run_key)  # import what arrived, split holdouts
        if arrivals.nothing_new:
            return config, arrivals
    return prepare_retrain(config, retrain, run_key, arrivals), arrivals


def _judge_and_promote(
    run: str, config: ConfigSchema, retrain: RetrainOptions, arrivals: Received | None
) -> dict[str, Any] | None:
    """With new data: the trained model on the holdout, and the gate. Promote unless it failed."""
    gate = None
    if arrivals is not None:
        evaluate_holdout(run, "trained")
        gate = judge_gate(run, retrain)
    if gate is None or gate.get("gate") != "failed":
        finish_retrain(run, config.checkpoint_path, retrain)  # promote: latest.json, prune
    return gate


def _train_remaining(
    run: str, config: ConfigSchema, plan: TrainingPlan, pause_every: int, pause_timeout_seconds: int
) -> list[dict[str, Any]]:
    """Run the plan's remaining iterations in one session; one table artifact per iteration."""
    logger = get_run_logger()
    per = plan.buckets_per_iteration
    total = plan.total_iterations * per
    artifact = start_progress(plan.committed_version * per, total, f"buckets trained of {config.checkpoint_path}")
    progress = RunProgress(artifact_id=artifact, total=total, buckets_per_iteration=per)
    results: list[dict[str, Any]] = []
    stack = ExitStack()  # a local Dask cluster, if this run starts one
    try:
        handle = _open_session(run, config, stack)
    except BaseException:
        stack.close()
        raise
    try:
        remaining = plan.remaining
        pause_after = [_pause_due(pause_every, it, plan.total_iterations) for it in remaining]
        calls = [
            partial(_run_iteration, handle, it, config.eval_fraction > 0, progress, config.checkpoint_path)
            for it in remaining
        ]
        # Each subflow is created while the previous iteration works (never across a pause).
        outcomes = SubflowPipeline().run_in_order(
            calls, [it.label for it in remaining], overlap_after=lambda index: not pause_after[index]
        )
        for iteration, due, result in zip(remaining, pause_after, outcomes, strict=True):
            results.append(result)
            if due:
                logger.info(
                    "paused after committing v%d (pause_every=%d): resume it from the UI",
                    iteration.version,
                    pause_every,
                )
                pause_flow_run(timeout=pause_timeout_seconds, poll_interval=2, key=f"after-v{iteration.version}")
    finally:
        with stack:
            if config.num_machines > 1:
                close_cluster_session(handle)
            else:
                close_training_session(handle)
    return results


def _open_session(run: str, config: ConfigSchema, stack: ExitStack) -> str:
    """The run's training session: in this process, or a coordinator of ``num_machines`` Dask workers."""
    if config.num_machines == 1:
        return open_training_session(run)
    address, local, workers = cluster_address(config, None, stack)
    return open_cluster_session(run, address, local, workers)


def _run_iteration(
    handle: str, iteration: Iteration, evaluate: bool, progress: RunProgress, checkpoint_path: str
) -> dict[str, Any]:
    """The iteration's subflow, then its table artifact on the subflow's page (posted from the
    subflow's helper thread: off the critical path)."""
    result = train_iteration(handle, iteration, evaluate, progress)
    publish_iteration_table(iteration, result["rows"], result["resumed"], checkpoint_path, result["flow_run_id"])
    return result


def _starts_new_rows(config: ConfigSchema, plan: TrainingPlan) -> bool:
    """Whether rows init_path lacks start at their neighbors' mean: something to train, and asked for."""
    return bool(plan.remaining) and starts_new_rows(config, plan.committed_version)


def _pause_due(pause_every: int, iteration: Iteration, total_iterations: int) -> bool:
    """Pause after every ``pause_every``-th version, never after the last one."""
    return pause_every > 0 and iteration.version % pause_every == 0 and iteration.version < total_iterations
