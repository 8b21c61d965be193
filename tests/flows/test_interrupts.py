"""Ctrl-C, SIGTERM and kill -9 of ``pbg`` commands, as a terminal or a supervisor sends them.

Each test runs the real command in its own session with a temporary PREFECT_HOME, signals it
when a line of its output shows a moment (training, committing, starting its server,
importing, exporting) and checks what a user relies on: the command ends within 5 s with
status 130 (SIGINT) or 143 (SIGTERM), no process it started is left, the checkpoint loads at
the version it says is committed, the flow run is Cancelled (read from the run's Prefect
database), and the command line it prints resumes the run. Where in a step the signal lands
varies from run to run: these assertions hold wherever it does.

The tests marked ``slow`` (more moments: SIGTERM while committing, Ctrl-C while the server
starts on a new PREFECT_HOME, eval, kill -9) run with ``PBG_SLOW_TESTS=1``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _signals import PBG, Signalled, leftovers, signal_when

from storage.checkpoints import CheckpointStore

EXIT_WITHIN_SECONDS = 5.0
EPOCHS = 6  # the signal comes in epoch 3 (a few ms to handle it, ~0.1 s per epoch): the run stops mid-way
slow = pytest.mark.skipif(os.environ.get("PBG_SLOW_TESTS") != "1", reason="slow: set PBG_SLOW_TESTS=1")


@pytest.fixture()
def env(tmp_path: Path) -> dict[str, str]:
    """The command's environment: a fresh PREFECT_HOME, no outside Prefect server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect_home")
    return env


@pytest.fixture()
def workdir(tmp_path: Path, graph: Any, config_for: Any) -> Path:
    """A directory holding config.json: the planted graph, 2 HOGWILD workers, :data:`EPOCHS` epochs."""
    config = config_for(graph, tmp_path / "model", num_epochs=EPOCHS, workers=2, eval_fraction=0.0,
                        checkpoint_preservation_interval=None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def assert_stopped(result: Signalled, signum: int) -> None:
    """Signalled, ended in time with 128 + signum, and nothing it started still runs."""
    assert result.signalled, result.output
    assert result.returncode == 128 + signum, result.output
    assert result.seconds_to_exit < EXIT_WITHIN_SECONDS, result.output
    assert result.descendants, "the command had started no process (server, workers): nothing was checked"
    assert leftovers(result.descendants) == set(), result.output


def hint(result: Signalled, command: str) -> tuple[int, list[str]]:
    """The committed version and the resume command line the interrupted command printed."""
    line = next(line for line in result.output.splitlines() if line.startswith(f"pbg {command}: interrupted by"))
    version = int(line.split("the committed checkpoint is version ")[1].split()[0])
    words = shlex.split(line.split("resume with: ")[1])
    assert words[:2] == ["pbg", command]
    return version, words[1:]


def assert_loads(checkpoint: Path, version: int) -> None:
    """The checkpoint's pointer says ``version`` and its embeddings and model load."""
    store = CheckpointStore(str(checkpoint))
    assert store.read_version() == version
    embeddings, _ = store.load_embeddings("node", 0, version)
    assert embeddings.shape == (200, 16) and bool(embeddings.isfinite().all())
    store.load_model(version)


def flow_runs(env: dict[str, str], flow: str) -> list[tuple[str, str, str | None]]:
    """(name, state type, state name) of every run of ``flow``, and of its subflows, in the run's database."""
    with sqlite3.connect(Path(env["PREFECT_HOME"]) / "prefect.db") as db:
        return db.execute(
            "SELECT fr.name, fr.state_type, fr.state_name FROM flow_run fr JOIN flow f ON f.id = fr.flow_id "
            "WHERE f.name = ? OR f.name = ? ORDER BY fr.created", (flow, f"{flow}-iteration")).fetchall()


def run_pbg(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``pbg ARGS`` to its end."""
    return subprocess.run([PBG, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=400, check=False)


def test_ctrl_c_while_training_cancels_the_run_keeps_the_checkpoint_and_prints_how_to_resume(
    env: dict[str, str], workdir: Path
) -> None:
    # Credentials as overrides (the local filesystem ignores them): the hint must not print them.
    args = ["train", "config.json", "-p", "batch_size=100", "-p", "storage_options.key=AKIAPLANTED",
            "-p", "storage_options.secret=s3cr3t-planted"]
    result = signal_when(args, r"epoch 3/\d+ .*training", signal.SIGINT, env, workdir)
    assert_stopped(result, signal.SIGINT)
    version, resume_args = hint(result, "train")
    assert 2 <= version < EPOCHS, result.output
    assert_loads(workdir / "model", version)
    assert "s3cr3t-planted" not in result.output and "AKIAPLANTED" not in result.output
    assert resume_args[-4:] == ["-p", "storage_options.key=<hidden>", "-p", "storage_options.secret=<hidden>"]
    runs = flow_runs(env, "pbg")
    assert runs[0][:2] == ("train model", "CANCELLED"), runs
    assert "CRASHED" not in {state for _, state, _ in runs} and "RUNNING" not in {state for _, state, _ in runs}
    assert "Traceback" not in result.output

    # The printed command (its hidden credential given again) carries on from the committed version.
    given = {"storage_options.key=<hidden>": "storage_options.key=AKIAPLANTED",
             "storage_options.secret=<hidden>": "storage_options.secret=s3cr3t-planted"}
    done = run_pbg([given.get(arg, arg) for arg in resume_args], env, workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{version} of {EPOCHS} iterations done" in done.stderr
    assert f"model is at version {EPOCHS}" in done.stdout
    assert_loads(workdir / "model", EPOCHS)
