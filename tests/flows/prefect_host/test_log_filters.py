"""flows.prefect_host.log_filters: what ``pbg train`` prints, our lines only by default, Prefect's own with
``--verbose``; Prefect's failure lines kept off the console; its routine lines kept out of a run's logs.

A first run on a brand-new PREFECT_HOME (its database is created, Prefect's migrations run)
must print no error, traceback, "database is locked" or telemetry line, and none of
Prefect's routine INFO lines; the per-bucket summary lines stay.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prefect.logging.handlers import PrefectConsoleHandler

from flows.prefect_host.log_filters import (
    PrefectChatter,
    RoutineLifecycleFilter,
    RunFailureFilter,
    RunUrlFilter,
    VerdictFilter,
    no_run_urls,
    one_traceback_on_console,
    quiet_console,
    quiet_run_failures,
)

PBG = str(Path(sys.executable).with_name("pbg"))
PREFECT_INFO = re.compile(r"\| INFO +\| (Flow run|Task run) '[^']*' - (Beginning|Finished in state|Created)")
NOISE = ("ERROR", "Traceback", "database is locked", "telemetry", "CancelledError")


@pytest.fixture(scope="module")
def runs(graph: Any, config_for: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The output of a first run on a new PREFECT_HOME, and of a --verbose run after it."""
    root = tmp_path_factory.mktemp("quiet")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PBG_", "DO_NOT_TRACK"))}
    env["PREFECT_HOME"] = str(root / "prefect_home")
    config = config_for(graph, root / "model", num_epochs=2, eval_fraction=0.1)
    (root / "config.json").write_text(json.dumps(config))
    out = {}
    for name, extra in (("first", []), ("verbose", ["--verbose", "-p", "num_epochs=3"])):
        done = subprocess.run(
            [PBG, "train", "config.json", *extra],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        out[name] = done.stdout + done.stderr
    return out


def test_a_first_run_on_a_new_prefect_home_prints_no_errors_and_no_prefect_chatter(runs: dict[str, str]) -> None:
    output = runs["first"]
    for noise in NOISE:
        assert noise not in output, output
    assert not PREFECT_INFO.search(output), output
    # Ours stay: a summary line per bucket and epoch, and the result.
    assert re.search(r"epoch 1/2, path 1/1, chunk 1/1: bucket \(0, 0\): trained \d+ edges .* loss", output), output
    assert re.search(r"epoch 2/2, path 1/1, chunk 1/1: bucket \(0, 0\): trained \d+ edges .* loss", output), output
    assert re.search(r"epoch 2/2, path 1/1, chunk 1/1: bucket \(0, 0\): held-out stats before training: .*mrr", output)
    assert re.search(r"epoch 2/2, path 1/1, chunk 1/1: bucket \(0, 0\): held-out stats after training: .*mrr", output)
    assert "model is at version 2" in output
    # The engine's steps (several per iteration) stay in the run's logs, off the terminal.
    for step in ("swapping partitions", "saving its partitions", "writing checkpoint version", "committing version"):
        assert step not in output, output
    assert output.count("iterations done") == 1, output


def test_verbose_shows_prefects_lines(runs: dict[str, str]) -> None:
    output = runs["verbose"]
    # named for the checkpoint's directory (model is generic: the one above it) and the time
    began = r"Beginning flow run 'train quiet\d*, \d{4}-\d\d-\d\d \d\d:\d\d UTC' for flow 'pbg'"
    assert re.search(began, output), output
    assert "Finished in state Completed()" in output
    assert "epoch 3/3, path 1/1, chunk 1/1: bucket (0, 0): trained" in output
    assert "epoch 3/3, path 1/1, chunk 1/1: committing version 3" in output


def _record(name: str, level: int, pathname: str, msg: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, pathname, 1, msg, None, None)


def test_the_filter_keeps_our_lines_logged_through_prefects_run_loggers() -> None:
    import prefect

    prefect_file = str(Path(prefect.__file__).parent / "flow_engine.py")
    chatter = PrefectChatter(str(Path(prefect.__file__).parent))
    assert not chatter.filter(_record("prefect.flow_runs", logging.INFO, prefect_file, "Beginning flow run 'x'"))
    assert chatter.filter(_record("prefect.flow_runs", logging.INFO, __file__, "checkpoint m is at version 2"))
    assert chatter.filter(_record("prefect.flow_runs", logging.WARNING, prefect_file, "a real warning"))
    assert not chatter.filter(
        _record(
            "prefect.task_runs",
            logging.ERROR,
            prefect_file,
            "Crash detected! Execution was aborted by an interrupt signal.",
        )
    )
    assert chatter.filter(_record("pbg_core.session.engine", logging.INFO, __file__, "bucket (0, 0): trained"))
    step = _record("pbg_core.session.engine", logging.INFO, __file__, "committing version 3")
    step.pbg_step = True
    assert not chatter.filter(step)


def test_quiet_console_leaves_verbose_runs_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    handler = PrefectConsoleHandler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        monkeypatch.setenv("PBG_VERBOSE", "1")
        quiet_console()
        assert not handler.filters
        monkeypatch.delenv("PBG_VERBOSE")
        quiet_console()
        quiet_console()
        assert [type(f) for f in handler.filters] == [PrefectChatter]
    finally:
        root.removeHandler(handler)


def _run_record(name: str, level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


@pytest.mark.parametrize(
    "name, level, msg, shown",
    [
        ("prefect.flow_runs", logging.ERROR, "Encountered exception during execution: ValueError('x')", False),
        ("prefect.task_runs", logging.ERROR, "Task run failed with exception: ValueError('x')", False),
        ("prefect.flow_runs", logging.INFO, "Finished in state Failed('Flow run encountered an exception')", False),
        ("prefect.task_runs", logging.ERROR, "Finished in state Failed('Task run encountered an exception')", False),
        ("prefect.flow_runs", logging.INFO, "Finished in state Completed()", True),
        ("prefect.task_runs", logging.INFO, "Task run failed with exception: X - Retry 1/3 will start", True),
        ("prefect.flow_runs", logging.ERROR, "Crash detected! Execution was interrupted", True),
        ("pbg_core.session.engine", logging.ERROR, "Encountered exception during execution", True),
    ],
)
def test_only_prefects_failure_lines_of_runs_are_dropped(name: str, level: int, msg: str, shown: bool) -> None:
    assert RunFailureFilter().filter(_run_record(name, level, msg)) is shown


def test_the_filter_sits_on_the_console_handler_only() -> None:
    from prefect import flow  # noqa: F401  (configures Prefect's logging)
    from prefect.logging.handlers import APILogHandler, PrefectConsoleHandler

    quiet_run_failures()
    quiet_run_failures()  # idempotent
    consoles = [h for h in logging.getLogger().handlers if isinstance(h, PrefectConsoleHandler)]
    assert consoles and all(sum(isinstance(f, RunFailureFilter) for f in h.filters) == 1 for h in consoles)
    api = [
        h
        for name in ("prefect.flow_runs", "prefect.task_runs")
        for h in logging.getLogger(name).handlers
        if isinstance(h, APILogHandler)
    ]
    assert api and not any(isinstance(f, RunFailureFilter) for h in api for f in h.filters)
    for handler in consoles:
        handler.filters = [f for f in handler.filters if not isinstance(f, RunFailureFilter)]


def test_debugging_shows_prefects_failure_line_without_its_copy_of_the_traceback() -> None:
    import io

    from prefect import flow  # noqa: F401  (configures Prefect's logging)
    from prefect.logging.handlers import PrefectConsoleHandler

    stream = io.StringIO()
    console = PrefectConsoleHandler(stream=stream)
    console.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    kept: list[str] = []
    root = logging.getLogger()
    root.addHandler(console)
    try:
        one_traceback_on_console()
        one_traceback_on_console()  # idempotent: wrapped once
        try:
            raise ValueError("boom")
        except ValueError:
            failure = _run_record("prefect.flow_runs", logging.ERROR, "Encountered exception during execution: boom")
            failure.exc_info = sys.exc_info()
            other = _run_record("prefect.task_runs", logging.INFO, "Task run failed with exception: boom - Retry 1/3")
            other.exc_info = sys.exc_info()
        for record in (failure, other):
            console.handle(record)
            kept.append(logging.Formatter().format(record))  # as a later handler (the API's) sees it
    finally:
        root.removeHandler(console)
    lines = stream.getvalue()
    assert "Encountered exception during execution: boom" in lines
    assert lines.count("Traceback (most recent call last)") == 1  # the retry line's only
    assert all("Traceback (most recent call last)" in text for text in kept)


@pytest.mark.parametrize(
    ("level", "msg", "kept"),
    [
        (logging.INFO, "Finished in state Completed()", False),
        (logging.INFO, "Beginning subflow run 'x' for flow 'train'", False),
        (logging.INFO, "Created task run 'train-bucket-0'", False),
        (logging.WARNING, "Finished in state Completed()", True),  # only INFO lines are routine
        (logging.INFO, "Finished in state Failed('boom')", True),
        (logging.INFO, "bucket (0, 1): loss 0.41", True),
    ],
)
def test_routine_filter_drops_only_info_lifecycle_lines(level: int, msg: str, kept: bool) -> None:
    assert RoutineLifecycleFilter().filter(_run_record("prefect.task_runs", level, msg)) is kept


def test_run_urls_are_dropped_inside_the_block_only() -> None:
    run_logger = logging.getLogger("prefect.flow_runs")
    with no_run_urls():
        assert [type(f) for f in run_logger.filters].count(RunUrlFilter) == 1
        assert not run_logger.filter(_run_record("prefect.flow_runs", logging.INFO, "View at http://127.0.0.1/runs/x"))
        assert run_logger.filter(_run_record("prefect.flow_runs", logging.INFO, "checkpoint m is at version 2"))
    assert not any(isinstance(f, RunUrlFilter) for f in run_logger.filters)


def test_a_verdict_runs_failure_lines_are_dropped_and_others_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect's lines for a returned Failed state (task_engine.py, flow_engine.py's run_flow): dropped
    for a run that ended in a verdict (tasks.verdicts), by its task run id, else its flow run id."""
    from tasks import verdicts

    judged_flow, judged_task, other = "f-judged", "t-judged", "t-other"
    monkeypatch.setattr(verdicts, "_verdict_runs", {judged_flow, judged_task})

    def record(msg: str, **ids: str) -> logging.LogRecord:
        made = _run_record("prefect.task_runs" if "task_run_id" in ids else "prefect.flow_runs", logging.ERROR, msg)
        made.__dict__.update(ids)
        return made

    keep = VerdictFilter().filter
    assert not keep(record("Engine execution exited with unexpected exception", flow_run_id=judged_flow))
    assert not keep(record("Task run failed with state: Failed('quality gate failed')", task_run_id=judged_task))
    assert keep(record("Task run failed with state: Failed('x')", task_run_id=other, flow_run_id=judged_flow))
    assert keep(record("Engine execution exited with unexpected exception", flow_run_id="f-crashed"))
    assert keep(record("Finished in state Failed('quality gate failed')", flow_run_id=judged_flow))  # the line stays
    assert keep(record("Engine execution exited with unexpected exception"))  # no run: kept
