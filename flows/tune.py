"""The ``pbg-tune`` flow: a tuning study on Optuna, each trial a ``pbg`` run in its own directory.

The flow resolves the base config once, reads and checks the search-space file before any trial
(:func:`tasks.tune_trials.load_space`: every problem one line, naming the file; a config without
``validation`` is refused), opens or resumes the study in its directory (``study.db``,
:mod:`tasks.tune_study`), and keeps up to P trials running in threads of this process
(:func:`tasks.tune_trials.plan_slots`). Each trial is a ``pbg-trial`` subflow ("trial N") that
runs the ``pbg`` flow in-process in ``<study_dir>/trials/trial-NNNN`` with seed = base seed +
N (a resumed trial keeps its directory's); the study's pruner hears its validations (:mod:`tasks.tune_listeners`) and may stop it as
early stopping would. A trial ends COMPLETE (its best validation value, from ``best.json``),
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
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Annotated, Any, cast

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State
from pydantic import BaseModel, Field

from flows.prefect_host.interrupts import cancel_on_interrupt
from flows.prefect_host.run_logs import forward_engine_logs
from flows.train import pbg, run_name
from pbg_core.config import ConfigSchema
from pbg_core.errors import ConfigError, TrainingDivergedError
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
    was_pruned,
)
from tasks.tune_trials import (
    Slots,
    earlier_validations,
    load_space,
    plan_slots,
    study_config,
    trial_config,
    trial_result,
    write_best_files,
)
from tasks.validation_steps import check_validation

JOIN_AFTER_INTERRUPT_SECONDS = 10.0  # trial threads stop at their next bucket boundary


class TrialOutcome(BaseModel):
    """How one trial ended: COMPLETE, PRUNED, FAIL, or INTERRUPTED (left RUNNING in the study)."""

    number: int
    state: str
    value: float | None = None
    epochs: int = 0
    seconds: float = 0.0
    reason: str = ""


def default_study_dir(config: ConfigSchema, study: str) -> str:
    """``<checkpoint_path>/tune-<study>``."""
    return os.path.join(config.checkpoint_path, f"tune-{study}")


@flow(name="pbg-trial", flow_run_name="trial {number}", validate_parameters=False)
@cancel_on_interrupt  # Ctrl-C/SIGTERM: Cancelled, not Crashed (flows/prefect_host/interrupts.py)
def pbg_trial(study: str, number: int, config: ConfigSchema, resumes: int | None = None) -> TrialOutcome:
    """Train one trial's config with the ``pbg`` flow (in-process); classify how it ended, never raise."""
    started = time.perf_counter()
    if resumes is not None:  # the interrupted trial's validations first: the steps go on where they were
        replay_validations(study, number, earlier_validations(config))
    with listening(config.checkpoint_path, pruning_listener(study, number)):
        # return_state=True: Prefect returns the run's final state (Flow.__call__'s overloads do not say so).
        state = cast(State[dict[str, Any]], pbg(config=config, return_state=True))
    seconds = round(time.perf_counter() - started, 1)
    if state.is_cancelled():
        return TrialOutcome(number=number, state="INTERRUPTED", seconds=seconds, reason=state.message or "")
    if not state.is_completed():
        error = state.result(raise_on_failure=False)
        return TrialOutcome(number=number, state="FAIL", seconds=seconds, reason=failure_reason(error))
    value, epochs = trial_result(config)
    result = state.result()
    if was_pruned(study, number):
        reason = str(result.get("stopped", "pruned"))
        return TrialOutcome(number=number, state="PRUNED", value=value, epochs=epochs, seconds=seconds, reason=reason)
    if value is None:
        reason = "no validation ran (num_epochs below validation.every_epochs)"
        return TrialOutcome(number=number, state="FAIL", epochs=epochs, seconds=seconds, reason=reason)
    reason = str(result.get("stopped", "")) + (f" (resumed trial {resumes})" if resumes is not None else "")
    return TrialOutcome(
        number=number, state="COMPLETE", value=value, epochs=epochs, seconds=seconds, reason=reason.strip()
    )


def failure_reason(error: Any) -> str:
    """One line: ``diverged: ...``, a config error's line, or ``<Type>: <message>``."""
    if isinstance(error, TrainingDivergedError):
        return f"diverged: {str(error).splitlines()[0]}"
    if isinstance(error, ConfigError):
        return str(error).replace("\n", " ")
    if isinstance(error, BaseException):
        first = str(error).splitlines()[0] if str(error) else ""
        return f"{type(error).__name__}: {first}"
    return str(error)


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
) -> dict[str, Any]:
    """Tune a config's fields with Optuna: trials of the `pbg` flow, pruned on validation, resumable.

    Args:
        space_url: The search-space file (YAML or JSON; docs/tuning.md, "Search space").
        trials: Finished trials the study should have (COMPLETE, PRUNED or FAIL; a rerun resumes to it).
        config: The base config (PBG's schema, with a validation section), inline.
        config_url: A JSON or YAML base config file instead of `config`.
        overrides: PBG-style `key=value` overrides of the base config.
        parallel: Trials at once at most (also bounded by the cores and the memory available).
        timeout_seconds: Stop asking for new trials after this many seconds (running ones finish).
        study_dir: The study's local directory (default: <checkpoint_path>/tune-<study>).
    """
    forward_engine_logs()
    started = time.monotonic()
    resolved = resolve_config(config, config_url, list(overrides or []))
    space = load_space(space_url, resolved, config_url)  # before any trial, before any thread: every problem at once
    base = study_config(resolved, space)
    with opened_run(base) as run:
        check_inputs(run)
        check_validation(run)
        slots = plan_slots(run, parallel)
    directory = study_dir or default_study_dir(base, space.study)
    study = open_study(space, directory, space_url)  # a resumed study given another space stops here
    logger = get_run_logger()
    logger.info("study %s in %s: %d trials at a time (%s)", space.study, directory, slots.trials, slots.why)
    try:
        deadline = None if timeout_seconds is None else started + timeout_seconds
        _run_trials(study, base, slots, trials, deadline)
        best = best_trial(study)
        done = finished_trials(study)
        table = trials_table(study)
    finally:
        close_study(study)
    summary: dict[str, Any] = {"study": space.study, "study_dir": directory, "finished": done, "trials": table}
    if best is None:
        logger.info("study %s: %d finished trials, none complete: no best config", space.study, done)
        return summary
    config_path, trial_path = write_best_files(base, best, directory)
    logger.info(
        "study %s: best trial %d, %s %.4f; %s (pbg train takes it)",
        space.study,
        best["number"],
        space.metric,
        best["value"],
        config_path,
    )
    return summary | {"best": best, "best_config": config_path, "best_trial": trial_path}


def _run_trials(study: str, base: ConfigSchema, slots: Slots, trials: int, deadline: float | None) -> None:
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
                running[pool.submit(context.run, _trial, study, base, ticket, slots.workers)] = ticket
            if not running:
                return
            done, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)  # 1 s: Ctrl-C lands here
            for future in done:
                ticket = running.pop(future)
                _record(study, ticket, future.result())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        wait(running, timeout=JOIN_AFTER_INTERRUPT_SECONDS)  # after an interrupt: each stops at its next bucket


def _trial(study: str, base: ConfigSchema, ticket: TrialTicket, workers: int) -> TrialOutcome:
    """Trial ``ticket``: its config (a config error fails it here), then the ``pbg-trial`` subflow; never raises
    an error (an interrupt goes through: the trial is left RUNNING for the next run to resume)."""
    try:
        config = trial_config(base, ticket, workers)
    except ConfigError as err:
        return TrialOutcome(number=ticket.number, state="FAIL", reason=failure_reason(err))
    try:
        return pbg_trial(study, ticket.number, config, ticket.resumes)
    except Exception as err:  # noqa: BLE001 - a trial that fails outside its run (its subflow's bookkeeping) is a FAIL too
        return TrialOutcome(number=ticket.number, state="FAIL", reason=failure_reason(err))


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
