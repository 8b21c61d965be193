"""bench/ is one package run as ``python -m bench.NAME``: its modules import each other as ``bench.…``,
never put anything on ``sys.path`` and never import from tests/ (tests may import bench.lib)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
TESTS_MODULES = {path.stem for path in (REPO / "tests").rglob("*.py")}


def imported_modules(path: Path) -> set[str]:
    """The top-level names of every module ``path`` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_no_bench_module_imports_tests_or_edits_the_path() -> None:
    problems = []
    for path in sorted(BENCH.rglob("*.py")):
        if ".pbg-venv" in path.parts or ".pykeen-venv" in path.parts:
            continue
        name = str(path.relative_to(REPO))
        problems += [f"{name} imports {module} from tests/" for module in imported_modules(path) & TESTS_MODULES]
        if "sys.path.insert" in path.read_text():
            problems.append(f"{name} edits sys.path")
    assert problems == []


def test_a_benchmark_runs_as_a_module_from_the_repository() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.scaling_model", "--help"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
