"""The ``pbg-retrain`` flow: scheduled retraining, one checkpoint directory per flow run under a root.

The config's ``checkpoint_path`` is the *root* of the run directories (docs/retraining.md). Each
flow run, under the root's lease (a second retraining run on the root stops, naming the holder):

1. **receives** what arrived in ``retrain.incoming.inputs`` (``pbg import --append``, the next
   import generation) and **holds out** a fraction of each new generation's edges for the gate;
   nothing new: the run is skipped, or fails (``retrain.on_no_new_data``);
2. takes its **own directory** ``{root}/run-{expected start}-{8 hex of its id}``, the same for
   every retry, whose ``config.json`` fixes what it starts from and trains on;
3. **grows** the previous promoted model: ``init_path``'s rows matched to today's entities by
   name, new entities started as the config says;
4. measures the **baseline**: that grown model on the holdout, before any training;
5. **trains** with the unchanged ``pbg`` flow (:mod:`flows.train`) as a subflow;
6. **evaluates** the trained model on the holdout and **judges** the gate (``min_mrr``,
   ``max_mrr_drop``): failed, the flow run ends Failed and nothing is promoted; else it
   **promotes** the run (``latest.json``) and deletes old runs beyond ``keep_last``.

A failed gate, and nothing new under ``on_no_new_data: fail``, are verdicts, not errors: the flow
run (and the task that judged) *returns* a Failed state whose message is one line, with both
figures and the limit (:mod:`tasks.verdicts`), and its logs hold no traceback. A retry of a run
already judged failed returns the same verdict at once, before importing, growing or training.
"""

# No `from __future__ import annotations`: Prefect validates a served run's parameters against
# the annotations (see flows/train.py).
from typing import Annotated, Any

from prefect import flow
from prefect.client.schemas.objects import State
from prefect.runtime import flow_run
from pydantic import Field

from flows.prefect_host.interrupts import cancel_on_interrupt
from flows.prefect_host.run_logs import forward_engine_logs
from flows.run_names import rename_current_run, run_name
from flows.train import pbg, prepare_start
from pbg_core.config import ConfigSchema
from storage import layout
from storage.retraining.arrivals import Received
from storage.retraining.gate import unpromoted_message
from storage.retraining.options import RetrainOptions
from storage.retraining.report import history_line, retrain_sections, skipped_line
from storage.retraining.state import RetrainState, as_json, read_state
from storage.stats_report import checkpoint_basename
from tasks.artifacts import publish_history_entry, publish_summary, retrain_history_key, summary_by_caller
from tasks.config import resolve_config
from tasks.lease import acquire_lease, release_lease
from tasks.plan import check_inputs, plan_training
from tasks.retrain import (
    acquire_retrain_lease,
    finish_retrain,
    latest_run,
    nothing_new,
    prepare_retrain,
    receive_arrivals,
)
from tasks.retrain_gate import evaluate_holdout, judge_gate, judged_before
from tasks.runs import opened_run
from tasks.verdicts import is_verdict, verdict

DEFAULT_OPTIONS = RetrainOptions.model_validate({})  # frozen: one shared default is never changed


@flow(name="pbg-retrain", flow_run_name=run_name("retrain"))
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def pbg_retrain(
    config: ConfigSchema | None = None,
    config_url: str | None = None,
    overrides: list[str] | None = None,
    retrain: RetrainOptions = DEFAULT_OPTIONS,
    pause_every: Annotated[int, Field(ge=0)] = 0,
    pause_timeout_seconds: Annotated[int, Field(ge=1)] = 3600,
    dask_address: str | None = None,
) -> dict[str, Any] | State:
    """Retrain into a new run directory under the config's checkpoint_path; promote it if it passes the gate.

    Args:
        config: The training config (PBG's schema), inline; its checkpoint_path is the root of
            the run directories, its edge_paths may be glob patterns (expanded when a run starts).
        config_url: A JSON or YAML config file (local path, file:// or s3://) instead of `config`.
        overrides: PBG-style `key=value` overrides with dotted paths (credentials refused, as for `pbg`).
        retrain: What a run imports, starts from, trains, keeps, and the gate that promotes it
            (docs/retraining.md).
        pause_every: Pause the training subflow after every N committed iterations (0: never).
        pause_timeout_seconds: A pause not resumed within this time fails the run.
        dask_address: The Dask scheduler to train on when the config's num_machines > 1.

    Returns:
        The trained run's result with ``gate`` (``retrain.json``), or a skipped run's; a failed
        gate or ``on_no_new_data: fail`` with nothing new: a Failed state (a verdict), its message
        one line.
    """
    forward_engine_logs()
    cluster = [f"dask_address={dask_address}"] if dask_address else []
    resolved = resolve_config(config, config_url, [*(overrides or []), *cluster])
    root = acquire_retrain_lease(resolved)  # a second retraining run on this root stops here, naming the holder
    try:
        run_key = layout.run_dir_name(str(flow_run.id), flow_run.scheduled_start_time)  # the same for every retry
        judged = judged_before(resolved, run_key, latest_run(resolved))
        if judged is not None:  # a retry of a run judged failed: the same verdict, before any work
            if judged.generation is not None:  # the retry was named again from the template
                rename_current_run(f"generation {judged.generation}")
            return verdict(judged.message)
        arrivals = receive_arrivals(resolved, retrain, run_key) if retrain.incoming is not None else None
        if arrivals is not None:
            rename_current_run("nothing new" if arrivals.nothing_new else f"generation {arrivals.generation}")
        if arrivals is not None and arrivals.nothing_new:
            skipped = nothing_new(resolved, retrain, return_state=True)  # skipped, or a verdict (on_no_new_data)
            _post_skipped(resolved, run_key, failed=is_verdict(skipped))
            return verdict(skipped.message or "") if is_verdict(skipped) else skipped.result()
        run_config = prepare_retrain(resolved, retrain, run_key, arrivals)  # its directory and config.json
        total = _grow(run_config, baseline=arrivals is not None and retrain.gated)
        with summary_by_caller():  # the night's one summary is this flow's, under the root's history key
            trained = pbg(config=run_config, pause_every=pause_every, pause_timeout_seconds=pause_timeout_seconds)
        gate = _judge_and_promote(run_config, resolved, retrain, arrivals, trained["version"], total)
    finally:
        release_lease(root)
    if gate is not None and gate.gate == "failed":
        return verdict(unpromoted_message(gate, latest_run(resolved)))  # the flow run ends Failed, one line
    return {**trained, "gate": as_json(gate) if gate is not None else None}


def _grow(run_config: ConfigSchema, baseline: bool) -> int:
    """The grown starting point (:func:`flows.train.prepare_start`), then, with ``baseline``, the
    previous model grown on the holdout, before any training; the run's total iterations."""
    with opened_run(run_config) as run:
        chunks = check_inputs(run)
        lease = acquire_lease(run)  # as the training subflow will: a second writer stops here
        try:
            plan = plan_training(run, chunks)
            prepare_start(run, run_config, plan)  # the pbg subflow finds it done
            if baseline:
                evaluate_holdout(run, "baseline")
        finally:
            release_lease(lease)
    return plan.total_iterations


def _judge_and_promote(
    run_config: ConfigSchema,
    resolved: ConfigSchema,
    retrain: RetrainOptions,
    arrivals: Received | None,
    version: int,
    total_iterations: int,
) -> RetrainState | None:
    """With new data: the trained model on the holdout, and the gate. Promote unless it failed."""
    with opened_run(run_config) as run:
        gate = None
        if arrivals is not None:
            evaluate_holdout(run, "trained")
            judging = judge_gate(run, retrain, return_state=True)  # Failed when the gate failed (a verdict)
            if not is_verdict(judging):
                judging.result()  # the task's own error, if it raised one
            gate = _judged(run_config)
        if gate is None or gate.gate != "failed":
            finish_retrain(run, resolved.checkpoint_path, retrain)  # promote: latest.json, prune
        publish_summary(  # a new version of the root's history: the night in one line, then its summary
            run,
            version,
            total_iterations,
            extra_sections=retrain_sections(gate, run_config),
            key=retrain_history_key(resolved.checkpoint_path),
            description=history_line(checkpoint_basename(run_config.checkpoint_path), gate),
        )
    return gate


def _post_skipped(resolved: ConfigSchema, run_key: str, failed: bool) -> None:
    """A night with nothing new is a version of the root's history too: it says the model stays."""
    line = skipped_line(run_key, latest_run(resolved), failed)
    markdown = f"# Retraining: {line}\n\nNo new edge list arrived and no imported generation is newer than the latest promoted run's.\n"
    publish_history_entry(retrain_history_key(resolved.checkpoint_path), line, markdown)


def _judged(run_config: ConfigSchema) -> RetrainState | None:
    """The run directory's ``retrain.json`` as :func:`tasks.retrain_gate.judge_gate` left it (its one owner)."""
    return read_state(run_config.checkpoint_path, run_config.storage_options_for_fs())
