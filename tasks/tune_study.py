"""A tuning study on Optuna: opened (or resumed) from ``<study_dir>/study.db``, asked, told, tabled.

The only module that imports Optuna (an import-linter contract says so). A study is Optuna's
RDB storage on the SQLite file ``study.db`` in the study's directory, opened with
``load_if_exists``, so a rerun of the same command resumes it. What this module adds to Optuna:

- **The space is the study's**: the normalized space (:func:`pbg_core.config.space_digest.normalized_space`)
  and its digest are kept in the study's user attributes and in ``space.json`` beside ``study.db``; a
  resumed study given another space is refused, naming the first change.
- **Trials a kill left RUNNING** (Optuna's heartbeat does not work with ask and tell) are told
  FAIL with the user attribute ``interrupted`` and their parameters enqueued again with their
  checkpoint directory, so the next trial asked resumes that directory's last committed version
  (:func:`reconcile_interrupted`).
- **Trial numbers**: Optuna's, from 0; a trial's directory is ``trials/trial-NNNN`` and its seed the
  base seed + NNNN, by the number of the trial that first trained in it (a resumed one keeps both:
  its run goes on as it started, and its earlier validations stay comparable).
- **Pruning** reports each validation as step ``index - 1`` (validations before it), so the
  pruners' warm-up and resource settings count validations (docs/tuning.md, "Search space").

A study lives in this process under a handle (:data:`_STUDIES`), as runs and sessions do.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from pbg_core.config.search_space import HyperbandPruner, MedianPruner, SearchSpace, point_overrides
from pbg_core.config.space_digest import check_unchanged, normalized_space, space_digest
from storage.fs.atomic import write_text_atomic
from storage.layout import SPACE_FILE, STUDY_FILE, TRIALS_DIR
from tasks._policies import plain_task
from tasks.runs import Registry
from tasks.tune_listeners import Listener

# Optuna's own INFO lines ("Trial 3 finished with value ...") would repeat our progress lines.
optuna.logging.set_verbosity(logging.WARNING)


@dataclass
class OpenStudy:
    """A study open in this process: Optuna's study, its space and the trials asked and not yet told."""

    study: optuna.Study
    storage: optuna.storages.RDBStorage
    space: SearchSpace
    study_dir: str
    trials_root: str  # where trials/trial-NNNN are: study_dir, or (trials on a Dask cluster) under checkpoint_path
    asked: dict[int, Trial] = field(default_factory=dict)
    pruned: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)  # asked/pruned, from the trials' threads


@dataclass(frozen=True)
class TrialTicket:
    """A trial asked of the study: its number, the overrides its values make, and its directory."""

    number: int
    params: dict[str, Any]
    overrides: list[str]
    checkpoint_dir: str
    resumes: int | None  # the interrupted trial whose directory it goes on training, if any
    seed_trial: int  # the trial that first trained in the directory: its seed is the run's (base seed + it)


_STUDIES: Registry[OpenStudy] = Registry("tuning study")


def trial_dir(study_dir: str, number: int) -> str:
    """``<study_dir>/trials/trial-NNNN``: the checkpoint directory of trial ``number``."""
    return os.path.join(study_dir, TRIALS_DIR, f"trial-{number:04d}")


def _pruner(space: SearchSpace) -> optuna.pruners.BasePruner:
    settings = space.pruner
    if isinstance(settings, MedianPruner):
        return optuna.pruners.MedianPruner(
            n_startup_trials=settings.startup_trials, n_warmup_steps=settings.warmup_evaluations
        )
    if isinstance(settings, HyperbandPruner):
        return optuna.pruners.HyperbandPruner(
            min_resource=settings.min_evaluations,
            max_resource=settings.max_evaluations or "auto",
            reduction_factor=settings.reduction_factor,
        )
    return optuna.pruners.NopPruner()


def _sampler(space: SearchSpace) -> optuna.samplers.BaseSampler:
    if space.sampler.type == "random":
        return optuna.samplers.RandomSampler(seed=space.sampler.seed)
    return optuna.samplers.TPESampler(seed=space.sampler.seed)


@plain_task(name="open-study", task_run_name="open study {space.study}")
def open_study(
    space: SearchSpace, study_dir: str, space_source: str | None = None, trials_root: str | None = None
) -> str:
    """Open (or resume) the study of ``space`` in ``study_dir``; returns its handle.

    Trials train in ``<trials_root>/trials/trial-NNNN`` (default: ``study_dir``; a URL or shared
    path when they train on Dask workers).

    A new study keeps the normalized space; a resumed one refuses another space, then has the
    trials a kill left RUNNING reconciled (:func:`reconcile_interrupted`).

    Raises:
        SearchSpaceError: the study was started with another space (the first change named).
    """
    os.makedirs(study_dir, exist_ok=True)
    storage = optuna.storages.RDBStorage(
        f"sqlite:///{os.path.join(os.path.abspath(study_dir), STUDY_FILE)}",
        engine_kwargs={"connect_args": {"timeout": 60}},  # trials' threads report while the flow tells
    )
    study = optuna.create_study(
        storage=storage,
        study_name=space.study,
        direction=space.direction,
        sampler=_sampler(space),
        pruner=_pruner(space),
        load_if_exists=True,
    )
    stored = study.user_attrs.get("space")
    if stored is None:
        study.set_user_attr("space", normalized_space(space))
        study.set_user_attr("space_digest", space_digest(space))
    elif study.user_attrs.get("space_digest") != space_digest(space):
        check_unchanged(stored, space, space_source)
    text = json.dumps(normalized_space(space), indent=2, sort_keys=True) + "\n"
    write_text_atomic(os.path.join(study_dir, SPACE_FILE), text)  # what the study tunes, readable beside it
    handle = _STUDIES.add(
        "study",
        OpenStudy(study=study, storage=storage, space=space, study_dir=study_dir, trials_root=trials_root or study_dir),
    )
    reconcile_interrupted(handle)
    return handle


def get_study(handle: str) -> OpenStudy:
    """The open study of ``handle`` (LookupError if it is not open in this process)."""
    return _STUDIES.get(handle)


def close_study(handle: str) -> None:
    """Forget the study (idempotent): its storage is on disk, every tell is committed."""
    _STUDIES.pop(handle)


def reconcile_interrupted(handle: str) -> list[int]:
    """Tell FAIL (``interrupted``) every trial left RUNNING, and enqueue its values again with its
    checkpoint directory; returns their numbers.

    Only a trial of a process that is gone is RUNNING at open: this process has asked none yet.
    """
    opened = get_study(handle)
    study = opened.study
    left = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for frozen in left:
        directory = frozen.user_attrs.get("checkpoint_dir") or trial_dir(opened.trials_root, frozen.number)
        # Optuna sets a user attribute through a live Trial only: another process's trial is
        # reached through the storage, by the id its FrozenTrial carries.
        opened.storage.set_trial_user_attr(frozen._trial_id, "interrupted", True)
        opened.storage.set_trial_user_attr(frozen._trial_id, "reason", "interrupted: resumed by a later trial")
        study.tell(frozen.number, state=TrialState.FAIL, skip_if_finished=True)
        first = frozen.user_attrs.get("seed_trial", frozen.number)
        attrs = {"checkpoint_dir": directory, "resumes": frozen.number, "seed_trial": first}
        study.enqueue_trial(dict(frozen.params), user_attrs=attrs)
    return [frozen.number for frozen in left]


def ask_trial(handle: str) -> TrialTicket:
    """A new trial: an enqueued (interrupted) one first, else the sampler's next point."""
    opened = get_study(handle)
    trial = opened.study.ask()
    point: dict[str, Any] = {}
    for path, param in sorted(opened.space.params.items()):
        if param.type == "float":
            point[path] = trial.suggest_float(path, param.low, param.high, log=param.log, step=param.step)
        elif param.type == "int":
            point[path] = trial.suggest_int(path, param.low, param.high, log=param.log, step=param.step)
        else:
            point[path] = trial.suggest_categorical(path, param.choices)
    directory = trial.user_attrs.get("checkpoint_dir") or trial_dir(opened.trials_root, trial.number)
    seed_trial = trial.user_attrs.get("seed_trial", trial.number)
    trial.set_user_attr("checkpoint_dir", directory)
    trial.set_user_attr("seed_trial", seed_trial)
    with opened.lock:
        opened.asked[trial.number] = trial
    resumes = trial.user_attrs.get("resumes")
    return TrialTicket(trial.number, point, point_overrides(opened.space, point), directory, resumes, seed_trial)


def pruning_listener(handle: str, number: int) -> Listener:
    """The listener (:mod:`tasks.tune_listeners`) of trial ``number``: report, and stop if pruned."""
    opened = get_study(handle)
    trial = opened.asked[number]

    def heard(index: int, epoch: int, value: float) -> str | None:
        trial.report(value, step=index - 1)  # validations before this one: what the pruners count
        if not trial.should_prune():
            return None
        with opened.lock:
            opened.pruned.add(number)
        return f"pruned by study {opened.space.study} (validation {index}, epoch {epoch})"

    return heard


def replay_validations(handle: str, number: int, values: list[float]) -> None:
    """Report the validations a resumed trial's directory holds already (its interrupted trial's), in order,
    so its run's next validation is reported at the same step as in a run never interrupted."""
    trial = get_study(handle).asked[number]
    for step, value in enumerate(values):
        trial.report(value, step=step)


def was_pruned(handle: str, number: int) -> bool:
    """Whether the pruner stopped trial ``number``."""
    opened = get_study(handle)
    with opened.lock:
        return number in opened.pruned


def tell_trial(handle: str, number: int, state: str, value: float | None, attrs: Mapping[str, Any]) -> None:
    """Record how trial ``number`` ended: ``COMPLETE`` (with ``value``), ``PRUNED`` or ``FAIL``.

    ``attrs`` (reason, epochs, seconds) are kept as the trial's user attributes, for the table.
    """
    opened = get_study(handle)
    with opened.lock:
        trial = opened.asked.pop(number)
    for key, item in attrs.items():
        trial.set_user_attr(key, item)
    states = {"COMPLETE": TrialState.COMPLETE, "PRUNED": TrialState.PRUNED, "FAIL": TrialState.FAIL}
    opened.study.tell(trial, value if state == "COMPLETE" else None, state=states[state])


def _finished(frozen: FrozenTrial) -> bool:
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return frozen.state in done and not frozen.user_attrs.get("interrupted")


def finished_trials(handle: str) -> int:
    """Trials that ended COMPLETE, PRUNED or FAIL (not interrupted): what ``--trials N`` counts."""
    return sum(_finished(t) for t in get_study(handle).study.get_trials(deepcopy=False))


def trials_table(handle: str) -> list[dict[str, Any]]:
    """One row per trial, by number: trial, state, each param, the metric, epochs, seconds, reason."""
    opened = get_study(handle)
    metric = opened.space.metric
    rows = []
    for frozen in opened.study.get_trials(deepcopy=False):
        if frozen.state == TrialState.WAITING:
            continue  # an interrupted trial's values, enqueued: its row is the trial that takes them
        state = "INTERRUPTED" if frozen.user_attrs.get("interrupted") else frozen.state.name
        row: dict[str, Any] = {"trial": frozen.number, "state": state}
        row.update({path: frozen.params.get(path) for path in sorted(opened.space.params)})
        row[metric] = frozen.value if frozen.state == TrialState.COMPLETE else frozen.user_attrs.get("value")
        row["epochs"] = frozen.user_attrs.get("epochs")
        row["seconds"] = frozen.user_attrs.get("seconds")
        row["reason"] = frozen.user_attrs.get("reason", "")
        rows.append(row)
    return rows


def best_trial(handle: str) -> dict[str, Any] | None:
    """The best COMPLETE trial: number, params, value, checkpoint directory and overrides; None if none."""
    opened = get_study(handle)
    complete = opened.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return None
    best = max(complete, key=lambda t: (t.value if t.value is not None else float("-inf"), -t.number))
    return {
        "number": best.number,
        "params": dict(best.params),
        "value": best.value,
        "metric": opened.space.metric,
        "checkpoint_dir": best.user_attrs.get("checkpoint_dir"),
        "overrides": point_overrides(opened.space, dict(best.params)),
    }


__all__ = [
    "TrialTicket",
    "ask_trial",
    "best_trial",
    "close_study",
    "finished_trials",
    "open_study",
    "pruning_listener",
    "reconcile_interrupted",
    "replay_validations",
    "tell_trial",
    "trial_dir",
    "trials_table",
    "was_pruned",
]
