"""The plan of pbg_core holds for every import statement: no circle, and each part imports only parts below it.

import-linter (``make lint-imports``) checks the same layers on the imports it resolves; this
test reads every ``import`` statement of the source with ``ast`` itself — module-level,
function-local and ``TYPE_CHECKING`` ones alike — so a circle hidden behind a type-only or
a late import fails here too. Layers, lowest first, as ``pbg_core/__init__.py`` states them.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from pathlib import Path

import pbg_core

ROOT = Path(pbg_core.__file__).parent

# Top-level modules every part may use; they import no part.
FOUNDATIONS = ("errors", "types", "registry", "seeding", "stats", "edgelist", "ports")
# The parts, lowest first: a part may import the foundations and the parts before it.
PARTS = ("config", "kernels", "model", "evaluation", "training", "parallel", "session", "distributed")


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root`` (a package named ``root.name``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _imported_modules(tree: ast.AST, module: str, is_package: bool, modules: Collection[str]) -> Iterator[str]:
    """The modules of ``modules`` that the import statements anywhere in ``tree`` name.

    ``from pkg import name`` names ``pkg.name`` when that is a module, else ``pkg`` (a name
    defined in its ``__init__``). The implicit import of a module's parent packages is not
    counted: Python finishes a package's ``__init__`` whatever its submodules import.
    """
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    yield f"{target}.{alias.name}"
                elif target in modules:
                    yield target


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package's ``__init__`` counts as the package)."""
    modules = module_files(root)
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[name] = set(_imported_modules(tree, name, path.name == "__init__.py", modules)) - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of ``graph`` as ``[a, b, ..., a]``, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def layer(module: str) -> int:
    """0 for a foundation, else 1 + the part's position in :data:`PARTS`."""
    top = module.split(".")[1]
    return 0 if top in FOUNDATIONS else PARTS.index(top) + 1


def test_the_finder_sees_function_local_and_type_checking_circles(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n")
    (pkg / "c.py").write_text("def f():\n    from . import a\n")
    assert find_cycle(import_graph(pkg)) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("def f():\n    return 1\n")
    assert find_cycle(import_graph(pkg)) is None


def test_no_module_of_pbg_core_imports_itself_back() -> None:
    cycle = find_cycle(import_graph(ROOT))
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_every_module_has_a_place_in_the_plan() -> None:
    misplaced = [
        name
        for name, path in module_files(ROOT).items()
        if name != "pbg_core"
        and not (name.count(".") == 1 and name.split(".")[1] in FOUNDATIONS)
        and name.split(".")[1] not in PARTS
    ]
    assert misplaced == [], f"not a foundation nor in a part {PARTS}: {misplaced}"
    assert sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()) == sorted(PARTS)


def test_each_part_imports_only_the_foundations_and_the_parts_below_it() -> None:
    upward = [
        f"{source} imports {target}"
        for source, targets in import_graph(ROOT).items()
        if source != "pbg_core"
        for target in targets
        if target != "pbg_core" and layer(target) > layer(source)
    ]
    assert upward == [], f"imports against the order {FOUNDATIONS} < {' < '.join(PARTS)}: {upward}"


def test_part_inits_import_nothing_but_configs_public_names() -> None:
    # pbg_core.parallel.worker_boot loads without torch only if the __init__ modules above it stay empty.
    heavy = {
        name: sorted(targets)
        for name, targets in import_graph(ROOT).items()
        if module_files(ROOT)[name].name == "__init__.py" and name != "pbg_core.config" and targets
    }
    assert heavy == {}
