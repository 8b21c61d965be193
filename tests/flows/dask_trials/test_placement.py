"""``pbg tune --dask-address``: trials on a real Dask cluster (``dask scheduler`` and ``dask worker``
processes on 127.0.0.1), through the real CLI; a worker killed mid-trial; and the refusals, one line
each, nothing written.

The study's values come from a seeded random sampler over a categorical learning rate (seed 6:
0.1, 0.1, 1e-5), so the two first trials train at once on the two workers and the third, asked
once one of them is complete, is the hopeless one the median pruner (one startup trial) stops at
its first validation. Of the first two, the one that ends second may be pruned at a later
validation (the median of one complete trial is that trial's value): that depends on timing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _cli import PBG, cli_environment, run_pbg
from dask_processes import DaskProcesses
from disk_state import changes, tree_state

from bench.lib.s3_server import free_port
from flows.dask_trials.placement import prefect_api_problem
from storage.best_version import read_best

ALL_NEGS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "none", "all_negs": True}]


@pytest.fixture(autouse=True)
def prefect_harness() -> Iterator[None]:
    """No Prefect server in this process (overrides the directory's session fixture): the CLI runs its own."""
    yield


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


def project(graph: Any, config_for: Any, root: Path, **fields: Any) -> Path:
    """``config.json`` (the planted graph, validated every epoch) and ``space.yaml`` in ``root``."""
    base = {"relations": ALL_NEGS, "num_uniform_negs": 0, "validation": {"edge_path": graph.test_path}}
    config = config_for(graph, root / "ckpt", **(base | {"num_epochs": 3, "eval_fraction": 0.0} | fields))
    (root / "config.json").write_text(json.dumps(config))
    space = {
        "study": "lr",
        "sampler": {"type": "random", "seed": 6},
        "pruner": {"type": "median", "startup_trials": 1},
        "params": {"lr": {"type": "categorical", "choices": [0.1, 1.0e-5]}},
    }
    (root / "space.yaml").write_text(yaml.safe_dump(space))
    return root


def refused(done: subprocess.CompletedProcess[str], code: int) -> list[str]:
    """The refusal's lines (stderr), once it is known to be one without a traceback."""
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    return done.stderr.strip().splitlines()


def tune(cli_env: dict[str, str], root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_pbg(cli_env, root, "tune", "config.json", "--space", "space.yaml", "--trials", "3", *extra)


def test_a_local_checkpoint_path_not_shared_is_refused_naming_it(
    graph: Any, config_for: Any, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    root = project(graph, config_for, tmp_path)
    before = tree_state(tmp_path)
    address = f"tcp://127.0.0.1:{free_port()}"  # never reached: the paths are refused first
    (line,) = refused(tune(cli_env, root, "--dask-address", address), 2)
    checkpoint = str(tmp_path / "ckpt")
    assert line.startswith(f"pbg tune: error: --dask-address {address}: each trial writes its checkpoint under")
    assert f"checkpoint_path {checkpoint!r}" in line and "set shared_paths: true (-p shared_paths=true)" in line
    assert changes(before, tree_state(tmp_path)) == []


def test_an_address_where_no_scheduler_answers_is_refused_naming_it(
    graph: Any, config_for: Any, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    root = project(graph, config_for, tmp_path, shared_paths=True)
    before = tree_state(tmp_path)
    address = f"tcp://127.0.0.1:{free_port()}"
    (line,) = refused(tune(cli_env, root, "--dask-address", address), 1)
    assert line.startswith(f"pbg tune: error: dask_address {address}: no Dask scheduler answered"), line
    assert changes(before, tree_state(tmp_path)) == []


def test_a_prefect_api_a_worker_cannot_reach_is_named_with_the_fix() -> None:
    url = f"http://127.0.0.1:{free_port()}/api"  # what a worker runs (open_trial_cluster), here on a closed port
    problem = prefect_api_problem(url)
    assert problem is not None and problem.startswith(f"cannot reach the Prefect API at {url} (URLError: ")
    assert "set PREFECT_API_URL to a Prefect server every worker reaches" in problem


@pytest.mark.slow  # the embedded server, then three pbg runs on two Dask workers: about 90 s on 2 shared cores
def test_trials_train_on_the_workers_and_the_hopeless_one_is_pruned(
    graph: Any, config_for: Any, tmp_path: Path, cli_env: dict[str, str], cluster: DaskProcesses
) -> None:
    root = project(graph, config_for, tmp_path, shared_paths=True)
    study_dir = tmp_path / "study"
    done = tune(cli_env, root, "--dask-address", cluster.address, "--parallel", "2", "--study-dir", str(study_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 trials at a time (--parallel 2, 2 Dask workers at " + cluster.address in done.stdout + done.stderr
    table = {row["trial"]: row for row in _latest_table(done.stdout, study_dir)}
    states = [table[n]["state"] for n in (0, 1, 2)]
    assert states[2] == "PRUNED", states
    assert table[2]["reason"].startswith("pruned by study lr (validation 1, epoch 1)") and table[2]["epochs"] == 1
    # Trials 0 and 1 (lr 0.1, seeds 0 and 1) train at once. The median pruner compares a validation
    # with the trials complete by then, so the one that ends second may be pruned at a later
    # validation where the first scored higher: which one, and whether, depends on timing.
    first_two = [table[n] for n in (0, 1)]
    assert "COMPLETE" in states[:2], states
    for row in first_two:  # pruned, if at all, after the validations a complete trial had made
        assert row["state"] == "COMPLETE" or re.match(r"pruned by study lr \(validation [23], ", row["reason"]), row
    complete = states.count("COMPLETE")
    assert f"3 finished trials ({complete} complete, {3 - complete} pruned)" in done.stdout, done.stderr
    trials = tmp_path / "ckpt" / "tune-lr" / "trials"  # under checkpoint_path, where the workers write
    for n in (0, 1):
        if table[n]["state"] == "COMPLETE":
            best = read_best(str(trials / f"trial-{n:04d}"))
            assert best is not None and best.value == table[n]["mrr"]
        assert json.loads((trials / f"trial-{n:04d}" / "config.json").read_text())["workers"] == 1  # its threads
    assert not (trials / "trial-0002" / "model.v2.h5").exists()  # pruned after its first version
    assert (study_dir / "study.db").is_file() and not (study_dir / "trials").exists()  # the study stays here
    written = json.loads((study_dir / "best_config.json").read_text())
    assert written["lr"] == 0.1 and written["checkpoint_path"] == str(study_dir / "best")


def _latest_table(stdout: str, study_dir: Path) -> list[dict[str, Any]]:
    """The study's rows, read back from its SQLite file (what the table artifact shows)."""
    import optuna

    study = optuna.load_study(study_name="lr", storage=f"sqlite:///{study_dir / 'study.db'}")
    rows = []
    for trial in study.get_trials(deepcopy=False):
        value = trial.value if trial.state.name == "COMPLETE" else trial.user_attrs.get("value")
        row = {"trial": trial.number, "state": trial.state.name, "mrr": value, **trial.user_attrs}
        rows.append(row)
    return rows


@pytest.mark.slow  # the embedded server, then two pbg runs of 20 epochs on two Dask workers, one killed: about 70 s
def test_a_worker_lost_mid_trial_fails_that_trial_and_the_study_goes_on(
    graph: Any, config_for: Any, tmp_path: Path, cli_env: dict[str, str], cluster: DaskProcesses
) -> None:
    root = project(graph, config_for, tmp_path, shared_paths=True, num_epochs=20)
    (root / "space.yaml").write_text(
        yaml.safe_dump(yaml.safe_load((root / "space.yaml").read_text()) | {"pruner": {"type": "none"}})
    )
    args = ["tune", "config.json", "--space", "space.yaml", "--trials", "2", "--parallel", "2"]
    args += ["--dask-address", cluster.address, "--study-dir", str(tmp_path / "study")]
    trials = tmp_path / "ckpt" / "tune-lr" / "trials"
    command = subprocess.Popen(
        [PBG, *args], cwd=root, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 300
        while not any(committed(path) >= 1 for path in trials.glob("trial-*")) and time.monotonic() < deadline:
            assert command.poll() is None, command.communicate()
            time.sleep(0.1)
        os.killpg(cluster.processes[1].pid, signal.SIGKILL)  # the first worker, nanny and all
        stdout, stderr = command.communicate(timeout=300)
    finally:
        if command.poll() is None:
            command.kill()
    assert command.returncode == 0, stdout + stderr
    assert "2 finished trials (1 complete, 1 failed)" in stdout, stdout + stderr
    rows = _latest_table(stdout, tmp_path / "study")
    (lost,) = [row for row in rows if row["state"] == "FAIL"]
    assert lost["reason"].startswith("lost Dask worker tcp://127.0.0.1:"), lost
    assert "its last committed version stays" in lost["reason"]


def committed(trial_dir: Path) -> int:
    try:
        return int((trial_dir / "checkpoint_version.txt").read_text().strip() or 0)
    except (OSError, ValueError):
        return 0
