"""The tuning study on real Optuna and a temporary SQLite file: ask/tell, pruning, resume, a changed space."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pbg_core.config.search_space import parse_space
from pbg_core.errors import SearchSpaceError
from tasks.tune_study import (
    ask_trial,
    best_trial,
    close_study,
    finished_trials,
    get_study,
    open_study,
    pruning_listener,
    replay_validations,
    tell_trial,
    trial_dir,
    trials_table,
    was_pruned,
)

SPACE: dict[str, Any] = {
    "study": "unit",
    "sampler": {"type": "random", "seed": 3},
    "pruner": {"type": "median", "startup_trials": 1, "warmup_evaluations": 0},
    "params": {
        "lr": {"type": "float", "low": 0.01, "high": 0.5, "log": True},
        "batch_size": {"type": "int", "low": 100, "high": 400, "step": 100},
        "loss_fn": {"type": "categorical", "choices": ["softmax", "logistic"]},
    },
}


def opened(tmp_path: Path, space: dict[str, Any] = SPACE) -> str:
    return open_study.fn(parse_space(space), str(tmp_path / "study"), "space.yaml")


def test_ask_gives_overrides_and_a_directory_and_tell_records_the_state(tmp_path: Path) -> None:
    study = opened(tmp_path)
    ticket = ask_trial(study)
    assert ticket.number == 0 and ticket.resumes is None
    assert ticket.checkpoint_dir == trial_dir(str(tmp_path / "study"), 0)
    assert ticket.checkpoint_dir.endswith("trials/trial-0000")
    assert [o.split("=")[0] for o in ticket.overrides] == ["batch_size", "loss_fn", "lr"]
    assert 0.01 <= ticket.params["lr"] <= 0.5 and ticket.params["batch_size"] in (100, 200, 300, 400)
    tell_trial(study, 0, "COMPLETE", 0.5, {"reason": "", "epochs": 3, "seconds": 1.5})
    failed = ask_trial(study)
    tell_trial(study, failed.number, "FAIL", None, {"reason": "diverged: loss is nan"})
    assert finished_trials(study) == 2
    table = trials_table(study)
    assert [(r["trial"], r["state"], r["mrr"], r["reason"]) for r in table] == [
        (0, "COMPLETE", 0.5, ""),
        (1, "FAIL", None, "diverged: loss is nan"),
    ]
    assert set(table[0]) == {"trial", "state", "lr", "batch_size", "loss_fn", "mrr", "epochs", "seconds", "reason"}
    best = best_trial(study)
    assert best is not None and best["number"] == 0 and best["value"] == 0.5
    assert best["overrides"] == ticket.overrides
    close_study(study)
    stored = json.loads((tmp_path / "study" / "space.json").read_text())
    assert stored["params"]["lr"]["high"] == 0.5 and stored["pruner"]["startup_trials"] == 1


def test_a_hopeless_trial_is_pruned_after_a_complete_one(tmp_path: Path) -> None:
    study = opened(tmp_path)
    first = ask_trial(study)
    listen = pruning_listener(study, first.number)
    assert [listen(i, i, 0.8) for i in (1, 2, 3)] == [None, None, None]  # startup trial: never pruned
    tell_trial(study, first.number, "COMPLETE", 0.8, {})
    second = ask_trial(study)
    listen = pruning_listener(study, second.number)
    reason = listen(1, 1, 0.1)
    assert reason == "pruned by study unit (validation 1, epoch 1)" and was_pruned(study, second.number)
    tell_trial(study, second.number, "PRUNED", None, {"reason": reason})
    assert [r["state"] for r in trials_table(study)] == ["COMPLETE", "PRUNED"]
    assert finished_trials(study) == 2
    close_study(study)


def test_a_trial_left_running_is_failed_as_interrupted_and_resumed_in_its_directory(tmp_path: Path) -> None:
    study = opened(tmp_path)
    done = ask_trial(study)
    tell_trial(study, done.number, "COMPLETE", 0.4, {})
    killed = ask_trial(study)  # never told: the process "died" here
    close_study(study)

    again = opened(tmp_path)
    assert finished_trials(again) == 1  # the interrupted trial is not counted
    table = trials_table(again)
    assert [(r["trial"], r["state"]) for r in table] == [(0, "COMPLETE"), (1, "INTERRUPTED")]
    resumed = ask_trial(again)
    assert resumed.number == 2 and resumed.resumes == killed.number and resumed.seed_trial == killed.number
    assert resumed.params == killed.params and resumed.overrides == killed.overrides
    assert resumed.checkpoint_dir == killed.checkpoint_dir  # it goes on from that directory's last version
    fresh = ask_trial(again)
    assert fresh.resumes is None and fresh.checkpoint_dir.endswith("trial-0003")
    close_study(again)


def test_a_changed_space_is_refused_naming_the_first_change(tmp_path: Path) -> None:
    close_study(opened(tmp_path))
    changed = json.loads(json.dumps(SPACE))
    changed["params"]["lr"]["high"] = 0.9
    db = tmp_path / "study" / "study.db"
    before = db.read_bytes()
    with pytest.raises(SearchSpaceError) as err:
        opened(tmp_path, changed)
    assert "params.lr.high: 0.5 -> 0.9" in str(err.value) and "space.yaml" in str(err.value)
    assert db.read_bytes() == before
    with sqlite3.connect(db) as connection:  # the study keeps the space it started with
        (count,) = connection.execute("select count(*) from trials").fetchone()
    assert count == 0


def test_handles_are_of_this_process_only(tmp_path: Path) -> None:
    study = opened(tmp_path)
    assert get_study(study).space.study == "unit"
    close_study(study)
    with pytest.raises(LookupError, match="tuning study"):
        get_study(study)


def test_a_resumed_trial_reports_its_directory_s_earlier_validations_first(tmp_path: Path) -> None:
    study = opened(tmp_path)
    ticket = ask_trial(study)
    replay_validations(study, ticket.number, [0.3, 0.4])
    assert pruning_listener(study, ticket.number)(3, 6, 0.5) is None  # the third validation: step 2
    tell_trial(study, ticket.number, "COMPLETE", 0.5, {})
    (frozen,) = get_study(study).study.get_trials()
    assert frozen.intermediate_values == {0: 0.3, 1: 0.4, 2: 0.5}
    close_study(study)
