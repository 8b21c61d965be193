"""The byte-level directory state the refusal tests compare: it must see every kind of change."""

from __future__ import annotations

from pathlib import Path

from disk_state import changes, tree_state


def test_sees_added_removed_and_changed_files(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.h5").write_bytes(b"12345")
    (tmp_path / "y.txt").write_text("3\n")
    before = tree_state(tmp_path)
    assert changes(before, tree_state(tmp_path)) == []
    (tmp_path / "a" / "x.h5").write_bytes(b"12346")  # same size, one byte differs
    (tmp_path / "y.txt").unlink()
    (tmp_path / "a" / ".hidden").write_text("")
    assert changes(before, tree_state(tmp_path)) == ["added a/.hidden", "removed y.txt", "changed a/x.h5"]


def test_a_missing_root_is_empty(tmp_path: Path) -> None:
    assert tree_state(tmp_path / "nothing") == {}
