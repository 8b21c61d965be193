"""storage.local_dirs: whether a local directory could be created, leaving nothing behind."""

from __future__ import annotations

from pathlib import Path

from storage.local_dirs import creatable_problem


def test_a_new_directory_below_a_writable_one_can_be_created_and_nothing_is_left(tmp_path: Path) -> None:
    assert creatable_problem(str(tmp_path / "a" / "b")) is None
    assert creatable_problem(str(tmp_path)) is None
    assert list(tmp_path.iterdir()) == []


def test_below_a_file_is_refused_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert creatable_problem(str(tmp_path / "f" / "ckpt")) == f"{tmp_path / 'f'} is a file, not a directory"


def test_a_place_nobody_may_write_is_refused_even_for_root() -> None:
    problem = creatable_problem("/proc/pbg-test/ckpt")
    assert problem is not None and problem.startswith("cannot create a directory in /proc (")
