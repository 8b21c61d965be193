"""The code stays readable in small pieces: no tracked Python file over 400 lines, no function
over 60 lines unless its docstring says why it is long (a sentence beginning "Long because").

Both limits are the project's (docs/architecture.md, "Code shape"); this test is what holds
them, so a file or function that grows past them fails here, naming it and its length.

A benchmark module (``bench/<name>.py``, run as ``python -m bench.<name>``) may have up to 1,100
lines: a benchmark is one script read top to bottom (its options, set-up, measured commands,
figures and tables), and cutting it at 400 lines spread one benchmark over five or six files
that only made sense together. What benchmarks share lives in ``bench/lib/``, which keeps the
400-line limit, as does everything else; the 60-line function limit holds everywhere.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_FILE_LINES = 400
MAX_BENCHMARK_LINES = 1100
MAX_FUNCTION_LINES = 60
REASON = "Long because"


def tracked_python_files() -> dict[str, str]:
    """Every tracked ``.py`` file's text, by repository path."""
    names = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    return {name: (REPO / name).read_text(encoding="utf-8") for name in names if (REPO / name).is_file()}


def line_limit(name: str) -> int:
    """The limit of the file at repository path ``name``: a benchmark module's, or everyone's."""
    parts = Path(name).parts
    return MAX_BENCHMARK_LINES if len(parts) == 2 and parts[0] == "bench" else MAX_FILE_LINES


def long_files(files: dict[str, str]) -> list[str]:
    """``path: N lines`` for each file over its limit."""
    return [
        f"{name}: {len(text.splitlines())} lines"
        for name, text in sorted(files.items())
        if len(text.splitlines()) > line_limit(name)
    ]


def long_functions(name: str, text: str) -> list[str]:
    """``path:line name: N lines`` for each function over the limit whose docstring gives no reason."""
    found = []
    for node in ast.walk(ast.parse(text, filename=name)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length > MAX_FUNCTION_LINES and REASON not in (ast.get_docstring(node) or ""):
            found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_file_is_over_the_limit() -> None:
    assert long_files(tracked_python_files()) == []


def test_no_function_is_over_the_limit_without_a_reason() -> None:
    found = [line for name, text in sorted(tracked_python_files().items()) for line in long_functions(name, text)]
    assert found == []


def test_no_two_test_files_share_a_base_name() -> None:
    """pytest imports a test file by its base name (no ``__init__.py`` in tests/): two would clash."""
    names = [Path(name).name for name in tracked_python_files() if Path(name).name.startswith("test_")]
    assert sorted({name for name in names if names.count(name) > 1}) == []


def test_the_checks_see_what_they_are_for() -> None:
    """The checks fire on a long file and on a long function, and accept a long one with a reason."""
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long_one = f"def f():\n{body}\n"
    assert long_functions("m.py", long_one) == [f"m.py:1 f: {MAX_FUNCTION_LINES + 1} lines"]
    with_reason = f'def f():\n    """Long because it is a table."""\n{body}\n'
    assert long_functions("m.py", with_reason) == []
    assert long_files({"big.py": "x = 1\n" * (MAX_FILE_LINES + 1)}) == [f"big.py: {MAX_FILE_LINES + 1} lines"]
    assert long_files({"ok.py": "x = 1\n" * MAX_FILE_LINES}) == []
    benchmark = "x = 1\n" * (MAX_FILE_LINES + 1)
    assert long_files({"bench/speed.py": benchmark, "bench/lib/runner.py": benchmark}) == [
        f"bench/lib/runner.py: {MAX_FILE_LINES + 1} lines"
    ]
    assert long_files({"bench/speed.py": "x = 1\n" * (MAX_BENCHMARK_LINES + 1)}) != []
