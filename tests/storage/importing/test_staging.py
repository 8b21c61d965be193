"""Staging: a Ctrl-C or SIGTERM during the moves is held until the caller is past its rollback."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_io import all_files, get_text, join, put_text

from storage.importing import staging as staging_module
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


# --- keep_replaced: an appending import must get back what it replaced if it fails ---


def test_keep_replaced_commit_replaces_and_leaves_no_backup(store_root: str) -> None:
    put_text(join(store_root, "out", "names.json"), "old")
    staging = Staging(keep_replaced=True)
    staged = staging.stage(join(store_root, "out"))
    put_text(join(staged, "names.json"), "new")
    put_text(join(staged, "count.txt"), "2")
    staging.commit()
    assert get_text(join(store_root, "out", "names.json")) == "new"
    assert sorted(p.rsplit("/", 1)[-1] for p in all_files(join(store_root, "out"))) == ["count.txt", "names.json"]


def test_keep_replaced_rollback_after_part_of_the_moves_restores_the_replaced_files(
    store_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_text(join(store_root, "out", "a.json"), "old a")
    put_text(join(store_root, "out", "b.json"), "old b")
    staging = Staging(keep_replaced=True)
    staged = staging.stage(join(store_root, "out"))
    put_text(join(staged, "a.json"), "new a")
    put_text(join(staged, "b.json"), "new b")
    put_text(join(staged, "c.json"), "new c")
    moves = 0
    real_move = staging_module.changes.move

    def failing_move(src: str, dst: str, storage_options: object = None) -> None:
        nonlocal moves
        moves += 1
        if moves == 4:  # a's backup and a, b's backup, then the move of b fails
            raise OSError("disk full")
        real_move(src, dst, storage_options)

    monkeypatch.setattr(staging_module.changes, "move", failing_move)
    with pytest.raises(OSError, match="disk full"):
        staging.commit()
    monkeypatch.undo()
    staging.rollback()
    files = sorted(p.rsplit("/", 1)[-1] for p in all_files(join(store_root, "out")))
    assert files == ["a.json", "b.json"]
    assert get_text(join(store_root, "out", "a.json")) == "old a"
    assert get_text(join(store_root, "out", "b.json")) == "old b"
