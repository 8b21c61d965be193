"""Ctrl-C on ``pbg tune`` through the real CLI: the study stops within seconds with two trials running in
threads, nothing it started outlives it, and the same command run again resumes it to N finished trials."""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from _signals import EXIT_WITHIN_SECONDS, leftovers, run_pbg, signal_when

ALL_NEGS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "none", "all_negs": True}]
SPACE = {
    "study": "lr",
    "sampler": {"type": "random", "seed": 6},
    "pruner": {"type": "none"},
    "params": {"lr": {"type": "categorical", "choices": [0.05, 0.1]}},
}


def committed(trial_dir: Path) -> int:
    try:
        return int((trial_dir / "checkpoint_version.txt").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


@pytest.mark.slow  # an interrupted study and its resumption, 3 trials of 6 epochs: 37-77 s
def test_ctrl_c_stops_the_study_within_seconds_and_the_same_command_resumes_it(
    graph: Any, config_for: Any, env: dict[str, str], tmp_path: Path
) -> None:
    fields = {"relations": ALL_NEGS, "num_uniform_negs": 0, "validation": {"edge_path": graph.test_path}}
    config = config_for(graph, tmp_path / "ckpt", num_epochs=6, eval_fraction=0.0, **fields)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    args = ["tune", "config.json", "--space", "space.yaml", "--trials", "3", "--parallel", "2"]
    trials = tmp_path / "ckpt" / "tune-lr" / "trials"

    # Once the first trial has committed two versions: both trials are mid-run in their threads.
    result = signal_when(args, lambda pid: committed(trials / "trial-0000") >= 2, signal.SIGINT, env, tmp_path)
    assert result.signalled and result.returncode == 130, result.output
    assert result.seconds_to_exit < EXIT_WITHIN_SECONDS, result.output
    assert leftovers(result.descendants) == set(), result.output
    line = next(line for line in result.output.splitlines() if line.startswith("pbg tune: interrupted by SIGINT"))
    assert shlex.split(line.split("run it again with: ")[1]) == ["pbg", *args]
    stopped_at = {path.name: committed(path) for path in trials.iterdir()}
    assert 2 <= stopped_at["trial-0000"] < 6, result.output

    done = run_pbg(args, env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "study lr: 3 finished trials (3 complete, " in done.stdout, done.stdout
    summary = done.stdout.splitlines()
    assert any(line.startswith("best config: ") for line in summary), done.stdout
    # The interrupted trials went on in their own directories: no directory was started twice.
    assert {path.name for path in trials.iterdir()} >= set(stopped_at)
    assert all(committed(trials / name) == 6 for name in stopped_at)
    # Each resumed trial was told its directory's earlier validations first: one step per epoch, none missing.
    study = optuna.load_study(study_name="lr", storage=f"sqlite:///{trials.parent / 'study.db'}")
    complete = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) == 3 and all(sorted(t.intermediate_values) == list(range(6)) for t in complete)
    best_config = json.loads((tmp_path / "ckpt" / "tune-lr" / "best_config.json").read_text())
    assert best_config["lr"] in (0.05, 0.1)
