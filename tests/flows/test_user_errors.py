"""flows.user_errors: the one line a failed command prints, and Prefect's failure lines kept off the console."""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Iterator

import pytest

from flows.user_errors import (
    DEBUG_HINT,
    RunFailureFilter,
    debug_enabled,
    describe,
    one_traceback_on_console,
    quiet_run_failures,
    report,
)
from pbg_core.errors import ConfigError
from storage.errors import DataNotFound


@pytest.fixture(autouse=True)
def prefect_harness() -> Iterator[None]:
    """No Prefect server here (overrides the directory's session fixture)."""
    yield


def test_our_errors_are_shown_as_they_are() -> None:
    assert describe(DataNotFound("data/x", "edge path does not exist")) == "data/x: edge path does not exist"
    assert describe(ConfigError(["lr: 'x' is not a number"], "c.json")) == "config in c.json: lr: 'x' is not a number"


def test_an_os_error_names_its_file_and_the_reason() -> None:
    assert describe(FileNotFoundError(2, "No such file or directory", "/tmp/a")) == "/tmp/a: No such file or directory"


def test_a_full_disk_no_write_site_named_is_still_one_plain_line() -> None:
    assert describe(OSError(errno.ENOSPC, "No space left on device", "/data/x.h5")) == (
        "/data/x.h5: the disk is full (or your quota is used up); free some space and rerun"
    )
    hdf5 = OSError("Can't synchronously write data (file write failed: ..., errno = 28, error message = ...)")
    assert describe(hdf5) == (
        f"a disk is full (or your quota is used up); free some space and rerun ({DEBUG_HINT}: it shows which file)"
    )


def test_anything_else_is_unexpected_and_says_how_to_see_more() -> None:
    line = describe(IndexError("list index\nout of range"))
    assert line == f"unexpected IndexError: list index out of range ({DEBUG_HINT})"


def test_report_prints_one_line_and_the_traceback_only_when_debugging(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        raise DataNotFound("x.tsv", "does not exist")
    except DataNotFound as exc:
        assert report("import", exc, debug=False) == 1
        assert capsys.readouterr().err == "pbg import: error: x.tsv: does not exist\n"
        report("import", exc, debug=True)
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last)")
    assert err.endswith("pbg import: error: x.tsv: does not exist\n")


@pytest.mark.parametrize("value, wanted", [("", False), ("0", False), ("1", True), ("true", True), ("YES", True)])
def test_pbg_debug_turns_debugging_on(monkeypatch: pytest.MonkeyPatch, value: str, wanted: bool) -> None:
    monkeypatch.setenv("PBG_DEBUG", value)
    assert debug_enabled(False) is wanted
    assert debug_enabled(True)


def _record(name: str, level: int, msg: str) -> logging.LogRecord:
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
    assert RunFailureFilter().filter(_record(name, level, msg)) is shown


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
            failure = _record("prefect.flow_runs", logging.ERROR, "Encountered exception during execution: boom")
            failure.exc_info = sys.exc_info()
            other = _record("prefect.task_runs", logging.INFO, "Task run failed with exception: boom - Retry 1/3")
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
