"""A built wheel holds every package of the project: ``pyproject.toml``'s package list reaches
every tracked directory with an ``__init__.py`` under the four top-level packages (an editable
install hides a missing subpackage; a wheel built for a worker image does not)."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[1]
TOP = ("pbg_core", "storage", "tasks", "flows")


def tracked_packages() -> set[str]:
    """Dotted names of the tracked directories of the four top-level packages that hold an ``__init__.py``."""
    names = subprocess.run(
        ["git", "ls-files", *(f"{top}/*__init__.py" for top in TOP)],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    return {str(Path(name).parent).replace("/", ".") for name in names}


def test_the_wheel_lists_every_package() -> None:
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    listed = set(find_packages(where=str(REPO), include=find["include"]))
    expected = tracked_packages()
    assert {"pbg_core.config", "storage.fs", "storage.importing"} <= expected
    assert listed == expected
