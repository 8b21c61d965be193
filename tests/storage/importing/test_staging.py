"""Staging: a Ctrl-C or SIGTERM during the moves is held until the caller is past its rollback."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.importing.staging import Staging, StopSignalHold


@pytest.fixture()
def seen() -> Iterator[list[int]]:
    """SIGINT and SIGTERM recorded instead of acted upon, for the test's duration."""
    got: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in StopSignalHold.SIGNALS}
    yield got
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def test_a_signal_during_the_commit_is_delivered_after_the_block(tmp_path: Path, seen: list[int]) -> None:
    old = tmp_path / "out"
    old.mkdir()
    (old / "a.txt").write_text("old")
    staging = Staging()
    staged = Path(staging.stage(str(old)))
    (staged / "a.txt").write_text("new")
    with StopSignalHold() as hold:
        try:
            hold.hold()
            os.kill(os.getpid(), signal.SIGTERM)  # as if it came half way through the moves
            os.kill(os.getpid(), signal.SIGINT)
            assert seen == []
            staging.commit()
        except BaseException:
            staging.rollback()
            raise
        assert seen == []
    assert seen == [signal.SIGTERM]  # the first one, once; the new output is whole
    assert (old / "a.txt").read_text() == "new"
    assert [p.name for p in old.iterdir()] == ["a.txt"]


def test_nothing_is_held_before_hold(seen: list[int]) -> None:
    with StopSignalHold():
        os.kill(os.getpid(), signal.SIGINT)
        assert seen == [signal.SIGINT]
    assert seen == [signal.SIGINT]
