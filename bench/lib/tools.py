"""Where the benchmarks find things: the repository, their scratch and result directories, the two
tools' executables (our ``pbg`` in .venv, PyPI torchbiggraph 1.0.0 in bench/.pbg-venv), the
metrics ``pbg eval --json`` prints, and the facts that make a result file readable later.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
WORK_DIR = BENCH_DIR / "work"
OURS_VENV = REPO_ROOT / ".venv"
PBG_VENV = BENCH_DIR / ".pbg-venv"
# The columns of a ``lhs<TAB>rel<TAB>rhs`` file, as both importers take them.
TSV_COLUMNS = ("--lhs-col", "0", "--rel-col", "1", "--rhs-col", "2")


class ToolMissingError(RuntimeError):
    """A benchmark needs an executable that is not installed."""


def ours_bin(name: str = "pbg") -> Path:
    """Path of our CLI (``.venv/bin/pbg``); raises ToolMissingError naming the fix if absent."""
    path = OURS_VENV / "bin" / name
    if not path.exists():
        raise ToolMissingError(f"{path} not found: run `make setup` first")
    return path


def pbg_bin(tool: str) -> Path:
    """Path of a PyPI torchbiggraph 1.0.0 console script in bench/.pbg-venv."""
    path = PBG_VENV / "bin" / tool
    if not path.exists():
        raise ToolMissingError(f"{path} not found: run `make pbg-venv` first")
    return path


def eval_metrics(stdout: str) -> dict[str, object]:
    """The metrics object ``pbg eval --json`` prints on its last non-empty stdout line.

    Raises:
        ValueError: stdout is empty, or its last line is not a JSON object (the line is named).
    """
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("`pbg eval --json` printed nothing on stdout")
    try:
        metrics = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise ValueError(f"last stdout line is not JSON: {lines[-1][:200]}") from None
    if not isinstance(metrics, dict):
        raise ValueError(f"last stdout line is not a JSON object: {lines[-1][:200]}")
    return metrics


def machine_info() -> dict[str, object]:
    """Facts that make a result file interpretable later: CPUs, Python, torch, time."""
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")), "")
    except OSError:
        pass
    import torch  # local: keeps `--help` of the benchmarks fast

    return {
        "hostname": platform.node(),
        "cpu_model": model,
        "usable_cpus": len(os.sched_getaffinity(0)),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
