"""flows.cli.progress_bar: plain lines when stderr is not a terminal, a rich bar when it is."""

from __future__ import annotations

import io

import pytest

from flows.cli.progress_bar import import_progress


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal (rich then draws its bar into it)."""

    def isatty(self) -> bool:
        return True


def test_without_a_terminal_each_report_is_one_plain_line(capsys: pytest.CaptureFixture[str]) -> None:
    with import_progress(1000) as progress:
        progress("counting", 500)
        progress("writing", 250)  # a new phase always reports: 0.5 + 0.5 * 250 / 500
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("   25.0%  counting: 500 of ~1,000 lines (")
    assert lines[1].startswith("   75.0%  writing: 250 of ~500 edges (")


def test_on_a_terminal_the_bar_shows_the_phase_and_ends_full(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    with import_progress(None) as progress:
        progress("writing", 3)
    drawn = terminal.getvalue()
    assert "writing: 3 of ~3 edges" in drawn and "100.0%" in drawn
