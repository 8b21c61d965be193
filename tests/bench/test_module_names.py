"""bench/ is on sys.path while the tests run (tests/bench/conftest.py): no script there may share
a name with an importable module, or it replaces that module for every test (a bench script named
``distributed.py`` broke ``from distributed import Client`` in the whole suite)."""

from __future__ import annotations

import importlib.machinery
import sys

from conftest import BENCH


def test_no_bench_script_shadows_an_importable_module() -> None:
    elsewhere = [entry for entry in sys.path if entry and entry != str(BENCH)]
    clashes = {}
    for script in sorted(BENCH.glob("*.py")):
        spec = importlib.machinery.PathFinder.find_spec(script.stem, elsewhere)
        if spec is not None or script.stem in sys.builtin_module_names:
            clashes[script.name] = spec.origin if spec is not None else "built-in"
    assert clashes == {}
