"""Config files of the benchmarks: PBG's format (a Python file with ``get_torchbiggraph_config()``),
which both tools load, read and written; a file is rewritten only when its text changes."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def load_config_dict(path: Path) -> dict[str, object]:
    """Call ``get_torchbiggraph_config()`` of a PBG-format .py config file.

    Raises:
        ValueError: the file cannot be loaded as a module (named).
    """
    spec = importlib.util.spec_from_file_location(f"bench_config_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load config file {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_torchbiggraph_config()


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (parents created) unless it already holds exactly that."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_config_module(path: Path, docstring: str, config: dict[str, object]) -> None:
    """A PBG-format config file whose ``get_torchbiggraph_config()`` returns ``config``."""
    write_if_changed(path, f'"""{docstring}"""\n\n\ndef get_torchbiggraph_config():\n    return {config!r}\n')
