"""The ``pbg`` console script as the CLI tests run it: a subprocess per command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PBG = str(Path(sys.executable).with_name("pbg"))


def cli_environment(prefect_home: Path) -> dict[str, str]:
    """This process's environment without Prefect settings, on its own PREFECT_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(prefect_home)
    # A brand-new home runs its SQLite migrations first: slow on a busy 2-core machine.
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "180"
    return env


def run_pbg(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``pbg ARGS`` in ``cwd``, its output captured."""
    return subprocess.run([PBG, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=400, check=False)
