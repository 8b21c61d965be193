"""A tuning study's decisions around its trials: trials at once, each trial's config, the best files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pbg_core.config import parse_config
from pbg_core.errors import ConfigError
from tasks.runs import opened_run
from tasks.tune_study import TrialTicket
from tasks.tune_trials import plan_slots, trial_config, write_best_files


def base(graph: Any, config_for: Any, tmp_path: Path, **fields: Any) -> Any:
    validation = {"edge_path": graph.test_path, "candidates": 50}
    return parse_config(config_for(graph, tmp_path / "ckpt", validation=validation, seed=7, **fields))


def test_a_trial_config_has_its_values_directory_seed_and_workers(graph: Any, config_for: Any, tmp_path: Path) -> None:
    ticket = TrialTicket(3, {"lr": 0.05}, ["lr=0.05"], str(tmp_path / "t3"), None, 3)
    config = trial_config(base(graph, config_for, tmp_path), ticket, 2)
    assert (config.lr, config.checkpoint_path, config.seed, config.workers) == (0.05, str(tmp_path / "t3"), 10, 2)
    resumed = TrialTicket(5, {"lr": 0.05}, ["lr=0.05"], str(tmp_path / "t3"), 3, 3)  # goes on in trial 3's directory
    assert trial_config(base(graph, config_for, tmp_path), resumed, 2).seed == 10
    with pytest.raises(ConfigError, match="trial 4"):
        bad = TrialTicket(4, {"batch_size": 33}, ["batch_size=33"], str(tmp_path / "t4"), None, 4)
        trial_config(base(graph, config_for, tmp_path), bad, 1)


def test_the_best_config_trains_in_the_study_and_masks_credentials(graph: Any, config_for: Any, tmp_path: Path) -> None:
    config = base(graph, config_for, tmp_path, storage_options={"key": "AKIAPLANTED", "secret": "planted-secret"})
    best = {
        "number": 2,
        "params": {"lr": 0.2},
        "metric": "mrr",
        "value": 0.5,
        "checkpoint_dir": "d",
        "overrides": ["lr=0.2"],
    }
    config_path, trial_path = write_best_files(config, best, str(tmp_path / "study"))
    text = Path(config_path).read_text()
    assert "planted-secret" not in text and "AKIAPLANTED" not in text
    written = json.loads(text)
    assert written["lr"] == 0.2 and written["seed"] == 7
    assert written["checkpoint_path"] == str(tmp_path / "study" / "best")
    assert json.loads(Path(trial_path).read_text()) == {k: v for k, v in best.items() if k != "overrides"}


def test_trials_at_once_are_bounded_by_parallel_and_the_cores(graph: Any, config_for: Any, tmp_path: Path) -> None:
    from pbg_core.parallel.worker_boot import default_num_workers

    cores = default_num_workers()
    with opened_run(base(graph, config_for, tmp_path)) as run:
        one = plan_slots.fn(run, 1)
        many = plan_slots.fn(run, 64)
    assert (one.trials, one.workers) == (1, cores)
    assert many.trials == cores and many.workers == 1  # a tiny graph: the memory allows every core
    assert f"{cores} cores" in many.why and "available" in many.why
