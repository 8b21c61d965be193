"""Ctrl-C, SIGTERM and kill -9 of ``pbg train`` and ``pbg eval``, as a terminal or a supervisor sends them.

Each test runs the real command in its own session with a temporary PREFECT_HOME, signals it
when a line of its output shows a moment (training, committing, starting its server,
evaluating) and checks what a user relies on: the command ends within 5 s with
status 130 (SIGINT) or 143 (SIGTERM), no process it started is left, the checkpoint loads at
the version it says is committed, the flow run is Cancelled (read from the run's Prefect
database), and the command line it prints resumes the run. Where in a step the signal lands
varies from run to run: these assertions hold wherever it does.

The tests marked ``slow`` (more moments: SIGTERM while committing, Ctrl-C while the server
starts on a new PREFECT_HOME, eval, kill -9) run with ``PBG_SLOW_TESTS=1``. The last tests
check the interrupt handling of :mod:`flows.prefect_host.interrupts` in this process. Interrupted imports and
exports: ``test_interrupted_import_export.py``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from _random_graph import random_edges, random_graph_config
from _signals import EXIT_WITHIN_SECONDS, Signalled, descendants, leftovers, run_pbg, signal_when

from storage.checkpoints import CheckpointStore

EPOCHS = 6  # the signal comes in epoch 3 (a few ms to handle it, ~0.1 s per epoch): the run stops mid-way
WHEN = r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"  # a run name's time (flows/run_names.py)
slow = pytest.mark.slow


@pytest.fixture()
def workdir(tmp_path: Path, graph: Any, config_for: Any) -> Path:
    """A directory holding config.json: the planted graph, 2 HOGWILD workers, :data:`EPOCHS` epochs."""
    config = config_for(
        graph,
        tmp_path / "model",
        num_epochs=EPOCHS,
        workers=2,
        eval_fraction=0.0,
        checkpoint_preservation_interval=None,
    )
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
            "WHERE f.name = ? OR f.name = ? ORDER BY fr.created",
            (flow, f"{flow}-iteration"),
        ).fetchall()


@pytest.mark.slow
def test_ctrl_c_while_training_cancels_the_run_keeps_the_checkpoint_and_prints_how_to_resume(
    env: dict[str, str], workdir: Path
) -> None:
    # Credentials as overrides (the local filesystem ignores them): the hint must not print them.
    args = [
        "train",
        "config.json",
        "-p",
        "batch_size=100",
        "-p",
        "storage_options.key=AKIAPLANTED",
        "-p",
        "storage_options.secret=s3cr3t-planted",
    ]
    result = signal_when(args, r"epoch 3/\d+, .*trained", signal.SIGINT, env, workdir)
    assert_stopped(result, signal.SIGINT)
    version, resume_args = hint(result, "train")
    assert 2 <= version < EPOCHS, result.output
    assert_loads(workdir / "model", version)
    assert "s3cr3t-planted" not in result.output and "AKIAPLANTED" not in result.output
    assert resume_args[-4:] == ["-p", "storage_options.key=<hidden>", "-p", "storage_options.secret=<hidden>"]
    runs = flow_runs(env, "pbg")
    assert runs[0][1] == "CANCELLED" and re.fullmatch(rf"train {re.escape(workdir.name)}, {WHEN}", runs[0][0]), runs
    assert "CRASHED" not in {state for _, state, _ in runs} and "RUNNING" not in {state for _, state, _ in runs}
    assert "Traceback" not in result.output

    # The printed command (its hidden credential given again) carries on from the committed version.
    given = {
        "storage_options.key=<hidden>": "storage_options.key=AKIAPLANTED",
        "storage_options.secret=<hidden>": "storage_options.secret=s3cr3t-planted",
    }
    done = run_pbg([given.get(arg, arg) for arg in resume_args], env, workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{version} of {EPOCHS} iterations done" in done.stderr
    assert f"model is at version {EPOCHS}" in done.stdout
    assert_loads(workdir / "model", EPOCHS)


@slow
def test_sigterm_to_the_command_alone_while_it_commits_cancels_the_run_and_the_resume_finishes_it(
    env: dict[str, str], workdir: Path
) -> None:
    """As a supervisor stops a service: SIGTERM to the main process only, here right as it commits v3."""
    result = signal_when(
        ["train", "config.json", "--verbose"], r"committing version 3", signal.SIGTERM, env, workdir, group=False
    )
    assert_stopped(result, signal.SIGTERM)
    version, resume_args = hint(result, "train")
    assert version in (2, 3), result.output  # the pointer is written whole or not at all
    assert_loads(workdir / "model", version)
    runs = flow_runs(env, "pbg")
    assert runs[0][1] == "CANCELLED" and re.fullmatch(rf"train {re.escape(workdir.name)}, {WHEN}", runs[0][0]), runs
    assert {state for _, state, _ in runs} <= {"COMPLETED", "CANCELLED"}, runs
    done = run_pbg(resume_args, env, workdir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_loads(workdir / "model", EPOCHS)


@slow
@pytest.mark.parametrize("seconds", [0.0, 3.0])
def test_ctrl_c_while_the_server_starts_on_a_new_prefect_home_ends_at_once(
    env: dict[str, str], workdir: Path, seconds: float
) -> None:
    """``seconds`` after the server process appears (importing, then migrating a new database:
    30 s or more): the command must not wait for the server to finish starting."""
    appeared: list[float] = []

    def server_started_seconds_ago(pid: int) -> bool:
        if not appeared and descendants(pid):
            appeared.append(time.monotonic())
        return bool(appeared) and time.monotonic() - appeared[0] >= seconds

    result = signal_when(["train", "config.json"], server_started_seconds_ago, signal.SIGINT, env, workdir)
    assert_stopped(result, signal.SIGINT)
    assert "; resume with: pbg train config.json" in result.output
    assert "could not be read" not in result.output  # e.g. torch half imported when the signal came
    assert not (workdir / "model" / "checkpoint_version.txt").exists()
    done = run_pbg(["train", "config.json", "-p", "num_epochs=1"], env, workdir)  # the same PREFECT_HOME works
    assert done.returncode == 0, done.stdout + done.stderr
    assert_loads(workdir / "model", 1)


@slow
def test_kill_9_of_the_command_leaves_no_process_and_the_checkpoint_loads(env: dict[str, str], workdir: Path) -> None:
    result = signal_when(["train", "config.json"], r"epoch 3/\d+, .*trained", signal.SIGKILL, env, workdir, group=False)
    assert result.signalled and result.returncode == -signal.SIGKILL, result.output
    assert result.descendants and leftovers(result.descendants, grace=10.0) == set(), result.output
    store = CheckpointStore(str(workdir / "model"))
    assert_loads(workdir / "model", store.read_version())
    assert 2 <= store.read_version() <= 3


@slow
def test_ctrl_c_during_eval_cancels_the_eval_run(env: dict[str, str], tmp_path: Path) -> None:
    from flows.train import pbg
    from pbg_core.config import parse_config
    from storage.config_loader import load_config
    from storage.importing.importer import import_edges
    from storage.importing.options import ImportOptions

    config_path = random_graph_config(tmp_path, dimension=64)
    edges = random_edges(tmp_path / "edges.tsv", num_edges=400_000, num_nodes=20_000)
    os.chdir(tmp_path)
    import_edges(load_config(str(config_path), []), [str(edges)], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    pbg(config=parse_config(json.loads(config_path.read_text())))
    # --verbose: the swap line of bucket (0, 1) marks the moment (step lines show only with it).
    result = signal_when(
        ["eval", "config.json", "-p", "workers=2", "--verbose"],
        r"evaluation: bucket \(0, 1\)",
        signal.SIGINT,
        env,
        tmp_path,
    )
    assert_stopped(result, signal.SIGINT)
    assert "pbg eval: interrupted by SIGINT" in result.output and "Traceback" not in result.output
    assert [state for _, state, _ in flow_runs(env, "pbg-eval")] == ["CANCELLED"]


def test_the_resume_command_line_is_the_users_own_quoted_with_credentials_hidden() -> None:
    from flows.prefect_host.interrupts import command_line

    argv = [
        "train",
        "my config.py",
        "-p",
        "storage_options.secret=abc",
        "-pstorage_options.key=AK",
        "--param=storage_options.client_kwargs.aws_session_token=t",
        "-p",
        "num_epochs=3",
        "-p",
        "storage_options.endpoint_url=http://x",
    ]
    assert shlex.split(command_line(argv)) == [
        "pbg",
        "train",
        "my config.py",
        "-p",
        "storage_options.secret=<hidden>",
        "-pstorage_options.key=<hidden>",
        "--param=storage_options.client_kwargs.aws_session_token=<hidden>",
        "-p",
        "num_epochs=3",
        "-p",
        "storage_options.endpoint_url=http://x",
    ]


def test_an_interrupt_in_a_flow_body_ends_the_run_cancelled_and_the_call_raises_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prefect import flow

    from flows.prefect_host import interrupts

    monkeypatch.setattr(interrupts, "_stop", interrupts._Stop())  # this process's state, for this test only

    @flow(name="interrupted-body")
    @interrupts.cancel_on_interrupt
    def body(stop: bool) -> int:
        if stop:
            raise KeyboardInterrupt
        return 1

    assert body(stop=False) == 1
    state = body(stop=True, return_state=True)
    assert state.is_cancelled() and state.message == "interrupted by SIGINT"
    with pytest.raises(KeyboardInterrupt), interrupts.flow_call():
        body(stop=True)


def test_an_error_out_of_a_flow_body_after_a_stop_signal_is_the_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect's task engine, interrupted while it starts a task run, raises 'ValueError: Task run is
    not set' instead of the interrupt (seen in CI): once a stop signal came, that is the stop."""
    from prefect import flow

    from flows.prefect_host import interrupts

    monkeypatch.setattr(interrupts, "_stop", interrupts._Stop())

    @flow(name="interrupted-while-starting-a-task")
    @interrupts.cancel_on_interrupt
    def body() -> int:
        raise ValueError("Task run is not set")

    with pytest.raises(ValueError, match="Task run is not set"):
        body()  # no signal came: a real error stays an error
    interrupts.note_signal(signal.SIGINT)
    state = body(return_state=True)
    assert state.is_cancelled()
    assert state.message == "interrupted by SIGINT (while stopping: ValueError: Task run is not set)"
    with pytest.raises(KeyboardInterrupt), interrupts.flow_call():
        body()


def test_a_stop_its_owner_asks_for_ends_the_runs_cancelled_and_records_no_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trial on a Dask worker (flows/dask_trials/worker.py): the check's reason stops the run at its
    next bucket boundary, the run and its parent end Cancelled with it, and no signal is recorded in
    the process (the worker's next trial runs as usual)."""
    from prefect import flow

    from flows.prefect_host import interrupts

    monkeypatch.setattr(interrupts, "_stop", interrupts._Stop())
    asked: list[str] = []

    @flow(name="stopped-by-its-owner")
    @interrupts.cancel_on_interrupt
    def child() -> int:
        interrupts.stop_if_signalled()  # a bucket boundary
        return 1

    @flow(name="parent-of-a-stopped-run")
    @interrupts.cancel_on_interrupt
    def parent() -> int:
        return child()

    with interrupts.stopping_when(lambda: asked[0] if asked else None):
        assert parent() == 1  # nothing asked yet
        asked.append("the tuning study cancelled this trial")
        state = parent(return_state=True)
    assert state.is_cancelled() and state.message == "stopped: the tuning study cancelled this trial"
    assert interrupts.received() is None
    assert child() == 1  # outside the block: nothing stops it


def _frame_of(filename: str) -> FrameType:
    """A frame of code compiled as if from ``filename``."""
    namespace: dict[str, Any] = {}
    exec(compile("import sys\ndef here():\n    return sys._getframe()\n", filename, "exec"), namespace)
    frame: FrameType = namespace["here"]()
    return frame


@pytest.mark.parametrize("filename", ["<frozen importlib._bootstrap>", "/usr/lib/python3.11/weakref.py"])
def test_a_signal_inside_importlib_or_a_weakref_callback_is_delivered_again_outside_it(
    monkeypatch: pytest.MonkeyPatch, filename: str
) -> None:
    """Raised in importlib's lock helpers the interrupt can leave the import lock held (every
    later import waits forever: a hang seen in CI); in a weakref callback it is ignored."""
    from flows.prefect_host import interrupts

    monkeypatch.setattr(interrupts, "_stop", interrupts._Stop())
    previous = signal.signal(signal.SIGINT, interrupts._handle)
    try:
        interrupts._handle(signal.SIGINT, _frame_of(filename))  # returns: nothing raised there
        with pytest.raises(KeyboardInterrupt):
            time.sleep(5)  # the signal comes again, in ordinary code
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupts.received() == signal.SIGINT


def test_a_signal_in_ordinary_code_raises_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.prefect_host import interrupts

    monkeypatch.setattr(interrupts, "_stop", interrupts._Stop())
    with pytest.raises(KeyboardInterrupt):
        interrupts._handle(signal.SIGINT, _frame_of("/work/flows/train.py"))


def test_prefects_sigterm_bridge_in_a_weakref_callback_is_delivered_again_outside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """During a flow run SIGTERM meets Prefect's handler: raised in a weakref callback its
    TerminationSignal was printed as ignored and the run went on (a CI failure); a ``pbg``
    command's flow call makes that handler defer as ours does."""
    from prefect.exceptions import TerminationSignal
    from prefect.utilities import engine

    from flows.prefect_host import interrupts

    monkeypatch.setattr(engine, "_prefect_sigterm_handler", engine._prefect_sigterm_handler)  # restored after
    with interrupts.flow_call():
        handler = engine._prefect_sigterm_handler
        with interrupts.flow_call():  # once: no deferral of a deferral
            assert engine._prefect_sigterm_handler is handler
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        handler(signal.SIGTERM, _frame_of("/root/.pyenv/versions/3.11.7/lib/python3.11/weakref.py"))  # returns
        with pytest.raises(TerminationSignal):
            time.sleep(5)  # the signal comes again, in ordinary code, to Prefect's meaning
        with pytest.raises(TerminationSignal):
            handler(signal.SIGTERM, _frame_of("/work/flows/train.py"))  # ordinary code: at once
    finally:
        signal.signal(signal.SIGTERM, previous)
