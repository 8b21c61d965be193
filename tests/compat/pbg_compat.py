"""Helpers of the PBG file-compatibility tests: PyPI torchbiggraph 1.0.0 driven by its console scripts.

PBG lives in its own virtualenv (``bench/.pbg-venv``, built by ``make pbg-venv``); the
environment variable ``PBG_COMPAT_VENV`` points elsewhere (a missing directory makes every
test that needs PBG skip, which is how a fresh clone's default run behaves).

The fixtures are in this directory's conftest.py; test modules import these helpers
(``from pbg_compat import ...``; conftest modules cannot be imported by name).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_ENV = "PBG_COMPAT_VENV"
DEFAULT_VENV = REPO / "bench" / ".pbg-venv"
# A checkout of PBG's main branch (the directory holding ``torchbiggraph/``), kept outside the
# repo: main has the N3 regularizer and the evaluator's loss that PyPI 1.0.0 lacks.
MAIN_SRC_ENV = "PBG_MAIN_SRC"
DRIVER = Path(__file__).with_name("pbg_driver.py")
# One PBG command on this tiny graph takes seconds; this only stops a hung run.
PBG_TIMEOUT_S = 300

# PBG's Stats.__str__: "pos_rank:  5.7 , mrr:  0.28 , ... , count:  400".
_STATS_LINE = re.compile(r"Stats: (.*)$", re.MULTILINE)
_METRIC = re.compile(r"(\w+):\s+([-+0-9.eE]+|nan|inf)")


def venv_dir() -> Path:
    """The PBG virtualenv: ``$PBG_COMPAT_VENV`` or ``bench/.pbg-venv``."""
    return Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)


@dataclass(frozen=True)
class PbgTools:
    """The console scripts of PyPI torchbiggraph 1.0.0."""

    bin_dir: Path

    def run(self, tool: str, *args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``torchbiggraph_{tool} args...`` in ``cwd``.

        With ``check`` a non-zero exit fails the test, showing the tool's output.
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PYTHON"))}
        env["OMP_NUM_THREADS"] = "1"  # two cores shared with other test processes
        argv = [str(self.bin_dir / f"torchbiggraph_{tool}"), *args]
        done = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=PBG_TIMEOUT_S, check=False
        )
        if check and done.returncode != 0:
            pytest.fail(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done


def parse_pbg_stats(output: str) -> dict[str, float]:
    """Metrics of the last ``Stats:`` line PBG's evaluator logged (the mean over all edge paths)."""
    lines = _STATS_LINE.findall(output)
    if not lines:
        raise AssertionError(f"no 'Stats:' line in PBG's output:\n{output[-3000:]}")
    return {name: float(value) for name, value in _METRIC.findall(lines[-1])}


def write_pbg_config(path: Path, config: Mapping[str, Any]) -> Path:
    """``config`` as a PBG ``.py`` config file (``get_torchbiggraph_config``) both tools load.

    The file name must be a valid module name: PBG imports the config as a module.
    """
    path.write_text(f"def get_torchbiggraph_config():\n    return {dict(config)!r}\n")
    return path


def read_tsv_rows(path: Path, key_fields: int) -> dict[tuple[str, ...], list[float]]:
    """An exported TSV as {first ``key_fields`` columns: the float values after them}."""
    rows: dict[tuple[str, ...], list[float]] = {}
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        key = tuple(fields[:key_fields])
        assert key not in rows, f"{path}: duplicate row {key}"
        rows[key] = [float(v) for v in fields[key_fields:]]
    return rows


def main_src_dir() -> Path | None:
    """``$PBG_MAIN_SRC`` if it holds PBG's main-branch source (``torchbiggraph/regularizers.py``)."""
    value = os.environ.get(MAIN_SRC_ENV)
    if not value or not (Path(value) / "torchbiggraph" / "regularizers.py").is_file():
        return None
    return Path(value)


def run_driver(
    tools: PbgTools, request: Mapping[str, Any] | list[Mapping[str, Any]], work: Path, main_src: Path | None = None
) -> Any:
    """Run ``pbg_driver.py`` on ``request`` (or a list of requests, in one process) with PBG's Python
    (main-branch source first on the path when ``main_src`` is given); returns its result(s)."""
    import torch

    work.mkdir(parents=True, exist_ok=True)
    request_path, result_path = work / "request.pt", work / "result.pt"
    torch.save([dict(r) for r in request] if isinstance(request, list) else dict(request), request_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "PYTHON"))}
    env["OMP_NUM_THREADS"] = "1"
    if main_src is not None:
        env["PYTHONPATH"] = str(main_src)
    argv = [str(tools.bin_dir / "python"), str(DRIVER), str(request_path), str(result_path)]
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=PBG_TIMEOUT_S, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return torch.load(result_path, weights_only=False)
