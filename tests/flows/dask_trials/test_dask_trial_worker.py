"""What a trial's run on a Dask worker does when its study stops: Ctrl-C on ``pbg tune --dask-address``
(the real CLI, real ``dask scheduler``/``dask worker`` processes) cancels the trials' tasks, each run
on a worker stops at its next bucket boundary (its lease released, its committed versions kept), and
the same command run again resumes the study in the same directories."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from _signals import run_pbg, signal_when
from dask_processes import DaskProcesses

from storage.layout import LEASE_FILE

ALL_NEGS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "none", "all_negs": True}]
SPACE = {
    "study": "lr",
    "sampler": {"type": "random", "seed": 6},
    "pruner": {"type": "none"},
    "params": {"lr": {"type": "categorical", "choices": [0.05, 0.1]}},
}
# The driver waits for its trials' runs to end (at most 8 s, their Prefect API still up) before it exits.
EXIT_WITHIN_SECONDS = 20.0
STOP_WITHIN_SECONDS = 10.0  # after the command's exit: a run the driver could not wait for still unwinding


def committed(trial_dir: Path) -> int:
    try:
        return int((trial_dir / "checkpoint_version.txt").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


@pytest.mark.slow  # an interrupted study on two workers and its resumption, 3 trials of 6 epochs: about 2 min
def test_ctrl_c_stops_the_runs_on_the_workers_and_the_same_command_resumes_them(
    graph: Any, config_for: Any, env: dict[str, str], tmp_path: Path, cluster: DaskProcesses
) -> None:
    fields = {"relations": ALL_NEGS, "num_uniform_negs": 0, "validation": {"edge_path": graph.test_path}}
    config = config_for(graph, tmp_path / "ckpt", num_epochs=6, eval_fraction=0.0, shared_paths=True, **fields)
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    args = ["tune", "config.json", "--space", "space.yaml", "--trials", "3", "--parallel", "2"]
    args += ["--dask-address", cluster.address]
    trials = tmp_path / "ckpt" / "tune-lr" / "trials"

    result = signal_when(args, lambda pid: committed(trials / "trial-0000") >= 2, signal.SIGINT, env, tmp_path)
    assert result.signalled and result.returncode == 130, result.output
    assert result.seconds_to_exit < EXIT_WITHIN_SECONDS, result.output

    deadline = time.monotonic() + STOP_WITHIN_SECONDS  # the runs on the workers unwind: leases released
    while any((path / LEASE_FILE).exists() for path in trials.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any((path / LEASE_FILE).exists() for path in trials.iterdir()), (result.seconds_to_exit, result.output)
    stopped_at = {path.name: committed(path) for path in trials.iterdir()}
    assert 2 <= stopped_at["trial-0000"] < 6, result.output
    time.sleep(2)
    assert {path.name: committed(path) for path in trials.iterdir()} == stopped_at  # nothing trains on

    done = run_pbg(args, env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "study lr: 3 finished trials (3 complete, " in done.stdout, done.stdout + done.stderr
    assert all(committed(trials / name) == 6 for name in stopped_at)  # resumed in their own directories
