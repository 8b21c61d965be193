"""The plan of the storage package, read from every import statement of its source.

Every ``import`` / ``from ... import`` of every module counts, wherever it stands: at the top, inside
a function (the lazy imports that keep torch out of ``pbg import``) or under ``TYPE_CHECKING``.
The rules (see ``storage/__init__.py``):

- no cycle between modules, nor between the top-level parts (a store module, ``fs``, ``edge_lists``,
  ``importing``, ``exporting``) once each subpackage is seen as one node;
- the stores (the top-level modules) import neither :mod:`storage.importing` nor
  :mod:`storage.exporting`, and those two never import each other;
- importing any module of :mod:`storage.importing` or :mod:`storage.edge_lists` (its readers) loads
  neither torch nor Prefect, and no module of :mod:`storage.exporting` loads Prefect (checked in a
  fresh interpreter).

import-linter holds the same rules from ``pyproject.toml``; this test also names each offending
import statement by file and line.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import storage

PACKAGE_DIR = Path(storage.__file__).parent
SUBPACKAGES = ("storage.importing", "storage.exporting")
# The stores' plumbing that is a package: one part, like a store module, that every store may import
# (edge_lists: how an edge list is read, shared by pbg import and whatever reads query files).
PLUMBING_PACKAGES = ("storage.fs", "storage.edge_lists")


class Edge(NamedTuple):
    """One import statement from a storage module to another storage module."""

    importer: str
    imported: str
    where: str  # "storage/x.py:12"


def module_name(path: Path) -> str:
    """``storage/importing/count.py`` -> ``storage.importing.count``; ``__init__.py`` names the package."""
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def storage_modules() -> dict[str, Path]:
    """Every module and package of storage by dotted name."""
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def imported_names(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool) -> Iterator[str]:
    """The dotted names one import statement may load: the module, and each ``from`` name as a submodule."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: resolve against the importer's package
        package = importer.split(".") if is_package else importer.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([node.module] if node.module else []))
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def statement_edges(importer: str, source: str, filename: str, modules: dict[str, Path]) -> list[Edge]:
    """Every import statement of one module's source that names another storage module (a ``from``
    name that is no module counts as an import of the module it comes from)."""
    edges = []
    is_package = filename.endswith("__init__.py")
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names = list(imported_names(node, importer, is_package))
        if isinstance(node, ast.Import):
            targets = {name for name in names if name in modules}
        else:
            targets = {name for name in names[1:] if name in modules}
            if names[0] in modules and len(targets) < len(names) - 1:
                targets.add(names[0])  # some names are attributes of the module itself
        edges.extend(
            Edge(importer, target, f"{filename}:{node.lineno}") for target in sorted(targets) if target != importer
        )
    return edges


def import_edges(modules: dict[str, Path]) -> list[Edge]:
    """Every import statement between two storage modules, over the whole package."""
    return [
        edge
        for importer, path in modules.items()
        for edge in statement_edges(importer, path.read_text(), str(path.relative_to(PACKAGE_DIR.parent)), modules)
    ]


def part_of(module: str) -> str:
    """The top-level part a module belongs to: its subpackage, or the store module itself."""
    packages = SUBPACKAGES + PLUMBING_PACKAGES
    return next((package for package in packages if module == package or module.startswith(package + ".")), module)


def find_cycle(edges: list[tuple[str, str]]) -> list[str] | None:
    """One cycle of the directed graph (as a closed path of nodes), or None."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def plan_violations(edges: list[Edge]) -> list[str]:
    """Every import that breaks the rules of the plan, one line each with its file and line."""
    problems = []
    for edge in edges:
        source, target = part_of(edge.importer), part_of(edge.imported)
        if source == target or target == "storage":
            continue
        if source not in SUBPACKAGES and target in SUBPACKAGES:
            problems.append(f"{edge.where}: the store {edge.importer} imports {edge.imported}")
        elif source in SUBPACKAGES and target in SUBPACKAGES:
            problems.append(f"{edge.where}: {source} imports {edge.imported} ({source} and {target} are independent)")
    for level, pairs in (
        ("modules", [(e.importer, e.imported) for e in edges]),
        (
            "parts",
            [(part_of(e.importer), part_of(e.imported)) for e in edges if part_of(e.importer) != part_of(e.imported)],
        ),
    ):
        cycle = find_cycle(pairs)
        if cycle:
            problems.append(f"import cycle between {level}: {' -> '.join(cycle)}")
    return problems


WALKER_CASE = """
from typing import TYPE_CHECKING
from storage import fs, layout
from storage.errors import BadDataError
from . import spill
if TYPE_CHECKING:
    from storage.checkpoints import CheckpointStore
def later():
    import storage.exporting.text
    from .names import NameIndex
"""


def test_the_walker_sees_every_kind_of_import() -> None:
    # Top level, relative, under TYPE_CHECKING and inside a function: all of them count.
    edges = statement_edges("storage.importing.count", WALKER_CASE, "storage/importing/count.py", storage_modules())
    assert [(edge.imported, edge.where) for edge in edges] == [
        ("storage.fs", "storage/importing/count.py:3"),
        ("storage.layout", "storage/importing/count.py:3"),
        ("storage.errors", "storage/importing/count.py:4"),
        ("storage.importing.spill", "storage/importing/count.py:5"),
        ("storage.checkpoints", "storage/importing/count.py:7"),
        ("storage.exporting.text", "storage/importing/count.py:9"),
        ("storage.importing.names", "storage/importing/count.py:10"),
    ]
    real = {(edge.importer, edge.imported) for edge in import_edges(storage_modules())}
    assert ("storage.probe", "storage.hdf5") in real  # the function-local import of check_reachable


def test_storage_has_no_cycle_and_keeps_its_plan() -> None:
    assert plan_violations(import_edges(storage_modules())) == []


def test_the_rules_catch_a_violating_import() -> None:
    edges = import_edges(storage_modules())
    bad = [
        Edge("storage.entities", "storage.importing.report", "storage/entities.py:99"),
        Edge("storage.exporting.text", "storage.importing.count", "storage/exporting/text.py:99"),
        Edge("storage.layout", "storage.fs.atomic", "storage/layout.py:99"),
    ]
    problems = plan_violations(edges + bad)
    assert problems[0] == "storage/entities.py:99: the store storage.entities imports storage.importing.report"
    assert problems[1].startswith("storage/exporting/text.py:99: storage.exporting imports storage.importing.count")
    assert any(p.startswith("import cycle between modules:") and "storage.layout" in p for p in problems)
    assert any(p.startswith("import cycle between parts:") for p in problems)


def loaded_in_fresh_interpreter(modules: list[str]) -> list[str]:
    """Which of torch and Prefect a fresh interpreter has loaded after importing ``modules``."""
    code = (
        f"import importlib, json, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in ('torch', 'prefect') if m in sys.modules)))"
    )
    run = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    return json.loads(run.stdout)


def test_importing_loads_neither_torch_nor_prefect_and_exporting_no_prefect() -> None:
    # `pbg import` starts in about 0.5 s because neither is loaded (torch alone: ~1.5 s, ~300 MB).
    names = sorted(storage_modules())
    importing = [name for name in names if part_of(name) in ("storage.importing", "storage.edge_lists")]
    exporting = [name for name in names if part_of(name) == "storage.exporting"]
    assert len(importing) > 15 and len(exporting) > 3
    assert loaded_in_fresh_interpreter(["storage", *importing]) == []
    assert "prefect" not in loaded_in_fresh_interpreter(exporting)
