"""The ``pbg-tune`` flow: a tuning study on Optuna, each trial a ``pbg`` run in its own directory.

The flow resolves the base config once, reads and checks the search-space file before any trial
(:func:`tasks.tune_trials.load_space`: every problem one line, naming the file; a config without
``validation`` is refused), opens or resumes the study in its directory (``study.db``,
:mod:`tasks.tune_study`), and keeps up to P trials running in threads of this process
(:func:`tasks.tune_trials.plan_slots`), or, given a ``dask_address``, one on each free worker of
that Dask cluster (:mod:`flows.dask_trials`). Each trial is a ``pbg-trial`` subflow ("trial N") that
runs the ``pbg`` flow, in-process or on its worker, in ``<study_dir>/trials/trial-NNNN`` (on a
cluster: ``<checkpoint_path>/tune-<study>/trials/trial-NNNN``, which the workers reach) with seed = base seed +
N (a resumed trial keeps its directory's); the study's pruner hears its validations (:mod:`tasks.tune_listeners`) and may stop it as
early stopping would (:mod:`flows.trial_outcome`). A trial ends COMPLETE (its best validation value, from ``best.json``),
PRUNED, or FAIL with a one-line reason (divergence, a config its values make invalid, any
error); the study goes on. After each trial the table artifact ``pbg-tune-<study>`` is posted
again; at the end ``best_config.json`` (which ``pbg train`` takes) and ``best_trial.json``.

Stopping: ``timeout_seconds`` stops asking for new trials. Ctrl-C/SIGTERM reaches the main
thread (flows/prefect_host/interrupts.py); each trial thread stops at its next bucket boundary
(:func:`flows.prefect_host.interrupts.stop_if_signalled`) and its Optuna trial stays RUNNING:
the next run of the study marks it interrupted and resumes its directory in a new trial (told the
directory's earlier validations first).
``trials`` counts finished trials (COMPLETE, PRUNED, FAIL; not interrupted), so the same
command resumes a study to the same total.
"""

# No `from __future__ import annotations`: Prefect validates a served run's parameters against
# the annotations (see flows/train.py).
import contextvars
import os
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Annotated, Any, cast

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State
from pydantic import Field

from flows.dask_trials.placement import close_trial_cluster, give_back, open_trial_cluster, take_worker, train_on_worker
from flows.prefect_host.interrupts import cancel_on_interrupt
from flows.prefect_host.run_logs import forward_engine_logs
from flows.run_names import run_name
from flows.train import pbg
from flows.trial_outcome import TrialOutcome, classify, end_of, failure_reason
from pbg_core.config import ConfigSchema
from pbg_core.config.cluster_rules import trial_placement_problem
from pbg_core.errors import ClusterError, ConfigError
from tasks.artifacts import publish_trials_table
from tasks.config import resolve_config
from tasks.plan import check_inputs
from tasks.runs import opened_run
from tasks.tune_listeners import listening
from tasks.tune_study import (
    TrialTicket,
    ask_trial,
    best_trial,
    close_study,
    finished_trials,
    get_study,
    open_study,
    pruning_listener,
    replay_validations,
    tell_trial,
    trials_table,
)
from tasks.tune_trials import (
    Slots,
    earlier_validations,
    load_space,
    plan_slots,
    study_config,
    trial_config,
    write_best_files,
)
from tasks.validation_steps import check_validation

JOIN_AFTER_INTERRUPT_SECONDS = 10.0  # trial threads stop at their next bucket boundary


def default_study_dir(config: ConfigSchema, study: str) -> str:
    """``<checkpoint_path>/tune-<study>``."""
    return os.path.join(config.checkpoint_path, f"tune-{study}")


@flow(name="pbg-trial", flow_run_name="trial {number}", validate_parameters=False)
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def pbg_trial(
    study: str, number: int, config: ConfigSchema, resumes: int | None = None, on: tuple[str, str] | None = None
) -> TrialOutcome:
    """Train one trial's config with the ``pbg`` flow, in-process or (``on``: a trial cluster's handle and
    worker) on a Dask worker; classify how it ended, never raise but for a lost Dask scheduler."""
    started = time.perf_counter()
    if resumes is not None:  # the interrupted trial's validations first: the steps go on where they were
        replay_validations(study, number, earlier_validations(config))
    if on is not None:
        end = train_on_worker(on[0], on[1], study, number, config)
    else:
        with listening(config.checkpoint_path, pruning_listener(study, number)):
            # return_state=True: Prefect returns the run's final state (Flow.__call__'s overloads do not say so).
            end = end_of(cast(State[dict[str, Any]], pbg(config=config, return_state=True)))
    return classify(study, number, config, end, round(time.perf_counter() - started, 1), resumes)


@flow(name="pbg-tune", flow_run_name=run_name("tune"))
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def pbg_tune(
    space_url: str,
    trials: Annotated[int, Field(ge=1)],
    config: ConfigSchema | None = None,
    config_url: str | None = None,
    overrides: list[str] | None = None,
    parallel: Annotated[int, Field(ge=1)] = 1,
    timeout_seconds: Annotated[float | None, Field(gt=0)] = None,
    study_dir: str | None = None,
    dask_address: str | None = None,
) -> dict[str, Any]:
    """Tune a config's fields with Optuna: trials of the `pbg` flow, pruned on validation, resumable.

    Args:
        space_url: The search-space file (YAML or JSON; docs/tuning.md, "Search space").
        trials: Finished trials the study should have (COMPLETE, PRUNED or FAIL; a rerun resumes to it).
        config: The base config (PBG's schema, with a validation section), inline.
        config_url: A JSON or YAML base config file instead of `config`.
        overrides: PBG-style `key=value` overrides of the base config.
        parallel: Trials at once at most (also bounded by the cores and the memory available, or by the
            Dask cluster's workers).
        timeout_seconds: Stop asking for new trials after this many seconds (running ones finish).
        study_dir: The study's local directory (default: <checkpoint_path>/tune-<study>).
        dask_address: A Dask scheduler (tcp://host:8786, or tls://) whose workers train the trials, one
            each; checkpoint_path must be a URL or shared_paths true (docs/tuning.md, "Trials on a Dask cluster").
    """
    forward_engine_logs()
    started = time.monotonic()
    resolved = resolve_config(config, config_url, list(overrides or []))
    space = load_space(space_url, resolved, config_url)  # before any trial, before any thread: every problem at once
    base = study_config(resolved, space)
    with opened_run(base) as run:
        check_inputs(run)
        check_validation(run)
        local = plan_slots(run, parallel) if dask_address is None else None
    directory = study_dir or default_study_dir(base, space.study)
    with _placed(base, space.study, parallel, dask_address, local) as (slots, cluster, trials_root):
        study = open_study(space, directory, space_url, trials_root)  # a resumed study given another space stops here
        get_run_logger().info(
            "study %s in %s: %d trials at a time (%s)", space.study, directory, slots.trials, slots.why
        )
        try:
            deadline = None if timeout_seconds is None else started + timeout_seconds
            _run_trials(study, base, slots, trials, deadline, cluster)
            best = best_trial(study)
            done = finished_trials(study)
            table = trials_table(study)
        finally:
            close_study(study)
    summary: dict[str, Any] = {"study": space.study, "study_dir": directory, "finished": done, "trials": table}
    return summary | _write_best(base, space.study, space.metric, best, directory, done)


@contextmanager
def _placed(
    base: ConfigSchema, study: str, parallel: int, dask_address: str | None, local: Slots | None
) -> Iterator[tuple[Slots, str | None, str | None]]:
    """Where the trials run: (trials at once, the Dask cluster's handle or None, where their directories
    are or None for the study's directory). On a cluster: checked first, closed at the end."""
    if dask_address is None:
        assert local is not None
        yield local, None, None
        return
    problem = trial_placement_problem(base, dask_address)
    if problem is not None:
        raise ConfigError([problem])
    cluster, slots = open_trial_cluster(dask_address, base, parallel)
    try:
        yield slots, cluster, default_study_dir(base, study)  # under checkpoint_path: the workers write there
    finally:
        close_trial_cluster(cluster)


def _write_best(
    base: ConfigSchema, study: str, metric: str, best: dict[str, Any] | None, directory: str, done: int
) -> dict[str, Any]:
    """``best_config.json`` and ``best_trial.json`` if a trial completed; what the summary adds."""
    logger = get_run_logger()
    if best is None:
        logger.info("study %s: %d finished trials, none complete: no best config", study, done)
        return {}
    config_path, trial_path = write_best_files(base, best, directory)
    logger.info(
        "study %s: best trial %d, %s %.4f; %s (pbg train takes it)",
        study,
        best["number"],
        metric,
        best["value"],
        config_path,
    )
    return {"best": best, "best_config": config_path, "best_trial": trial_path}


def _run_trials(
    study: str, base: ConfigSchema, slots: Slots, trials: int, deadline: float | None, cluster: str | None
) -> None:
    """Keep up to ``slots.trials`` trials running until ``trials`` have finished or the deadline passed."""
    pool = ThreadPoolExecutor(max_workers=slots.trials, thread_name_prefix="pbg-trial")
    running: dict[Future[TrialOutcome], TrialTicket] = {}
    try:
        while True:
            finished = finished_trials(study)
            while (
                len(running) < slots.trials
                and finished + len(running) < trials
                and (deadline is None or time.monotonic() < deadline)
            ):
                ticket = ask_trial(study)
                context = contextvars.copy_context()  # the trial is a subflow of this flow run
                running[pool.submit(context.run, _trial, study, base, ticket, slots.workers, cluster)] = ticket
            if not running:
                return
            done, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)  # 1 s: Ctrl-C lands here
            for future in done:
                ticket = running.pop(future)
                _record(study, ticket, future.result())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        wait(running, timeout=JOIN_AFTER_INTERRUPT_SECONDS)  # after an interrupt: each stops at its next bucket


def _trial(study: str, base: ConfigSchema, ticket: TrialTicket, workers: int, cluster: str | None) -> TrialOutcome:
    """Trial ``ticket``: its config (a config error fails it here), then the ``pbg-trial`` subflow, here or on a
    free worker of ``cluster`` (with that worker's threads as its workers); never raises an error but a lost
    Dask cluster's (an interrupt goes through: the trial is left RUNNING for the next run to resume)."""
    worker = None
    if cluster is not None:
        worker, workers = take_worker(cluster)  # no worker left: ClusterError, the study stops
    try:
        config = trial_config(base, ticket, workers)
    except ConfigError as err:
        if worker is not None:
            give_back(cluster or "", worker)
        return TrialOutcome(number=ticket.number, state="FAIL", reason=failure_reason(err))
    try:
        return pbg_trial(study, ticket.number, config, ticket.resumes, None if worker is None else (cluster, worker))
    except ClusterError:
        raise  # the scheduler is lost: the study stops (this trial stays RUNNING, resumed by the next run)
    except Exception as err:  # noqa: BLE001 - a trial that fails outside its run (its subflow's bookkeeping) is a FAIL too
        return TrialOutcome(number=ticket.number, state="FAIL", reason=failure_reason(err))
    finally:
        if worker is not None:
            give_back(cluster or "", worker)


def _record(study: str, ticket: TrialTicket, outcome: TrialOutcome) -> None:
    """Tell the study how the trial ended (an interrupted one stays RUNNING), log it, re-post the table."""
    if outcome.state == "INTERRUPTED":
        return
    attrs = {"reason": outcome.reason, "epochs": outcome.epochs, "seconds": outcome.seconds, "value": outcome.value}
    tell_trial(study, ticket.number, outcome.state, outcome.value, attrs)
    shown = f" {outcome.value:.4f}" if outcome.value is not None else ""
    values = ", ".join(ticket.overrides)
    why = f": {outcome.reason}" if outcome.reason else ""
    get_run_logger().info(
        "trial %d %s%s in %.1f s, %d epochs (%s)%s",
        ticket.number,
        outcome.state,
        shown,
        outcome.seconds,
        outcome.epochs,
        values,
        why,
    )
    opened = get_study(study)
    publish_trials_table(opened.space.study, opened.study_dir, trials_table(study))
