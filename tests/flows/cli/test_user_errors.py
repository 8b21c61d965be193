"""flows.cli.user_errors: the one line a failed command prints (Prefect's failure lines kept off the console:
tests/flows/prefect_host/test_log_filters.py)."""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

from flows.cli.user_errors import DEBUG_HINT, debug_enabled, describe, report
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
