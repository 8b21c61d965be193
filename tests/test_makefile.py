"""``make setup`` reinstalls when pyproject.toml's content changed, whatever the file dates say."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"
INSTALL = "pip install --quiet -e '.[dev]'"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def planned(tree: Path) -> str:
    """What ``make setup`` would run in ``tree`` (``make -n``: nothing runs)."""
    return subprocess.run(
        ["make", "-n", "setup", "PYTHON=sh"], cwd=tree, capture_output=True, text=True, check=True, timeout=60
    ).stdout


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A checkout with an installed venv: the Makefile, a pyproject.toml, a python, the stamp written."""
    shutil.copy(MAKEFILE, tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["a"]\n')
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    stamp = subprocess.run("cksum < pyproject.toml", shell=True, cwd=tmp_path, capture_output=True, check=True)
    (tmp_path / ".venv" / ".installed").write_bytes(stamp.stdout)
    return tmp_path


def test_an_installed_venv_is_left_alone(tree: Path) -> None:
    assert INSTALL not in planned(tree)


def test_a_changed_pyproject_older_than_the_stamp_reinstalls(tree: Path) -> None:
    # tar, rsync -a and cp -p keep a file's date: the new dependency list looks older than the install.
    pyproject = tree / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["a", "b"]\n')
    old = (tree / ".venv" / ".installed").stat().st_mtime - 86400
    os.utime(pyproject, (old, old))
    assert INSTALL in planned(tree)


def test_a_venv_without_its_python_reinstalls(tree: Path) -> None:
    (tree / ".venv" / "bin" / "python").unlink()
    assert INSTALL in planned(tree)
