"""A local deployed stack for the benchmarks that measure deployed runs (bench.deploy_latency, bench.pipeline).

``deployments/local-up.sh`` in a PREFECT_HOME of the benchmark's own: a Prefect server on
127.0.0.1 with SQLite, the ``pbg-local`` process work pool, ``prefect deploy`` of
deployments/prefect.yaml (flow-run heartbeats every 30 s), a worker polling every 2 s;
``deployments/local-down.sh`` stops it. Plus the UMLS training both benchmarks deploy, imported
with ``pbg import`` into a scratch directory.

Every command gets :func:`clean_env`: no Prefect setting of the caller's, and this checkout first
on PYTHONPATH, so the worker's flow-run processes run the code being measured (an editable
install of another checkout would otherwise win).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.lib.configs import load_config_dict
from bench.lib.tools import BENCH_DIR, REPO_ROOT, TSV_COLUMNS, ours_bin

LOCAL_UP = REPO_ROOT / "deployments" / "local-up.sh"
LOCAL_DOWN = REPO_ROOT / "deployments" / "local-down.sh"
UMLS = REPO_ROOT / "data" / "kg" / "umls" / "train.txt"
KG_CONFIG = BENCH_DIR / "configs" / "kg_complex.py"
UP_TIMEOUT_S = 420  # server migrations on a new SQLite DB + deploy + worker, on 2 shared cores


def interrupt(signum: int, _frame: object) -> None:
    """A SIGTERM handler that behaves like Ctrl-C, so the ``finally`` blocks bring the stack down."""
    raise KeyboardInterrupt(f"signal {signum}")


def clean_env(home: Path) -> dict[str, str]:
    """Our environment without Prefect settings, with PREFECT_HOME=``home`` and this checkout first on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    return env


def import_umls(work: Path, epochs: int) -> Path:
    """Import UMLS's train split into ``work/data``; write and return the training config.

    One partition, one edge path and one chunk: one bucket and one iteration per epoch.
    """
    # The quality benchmark's ComplEx config (bench/configs/kg_complex.py), on absolute paths of the
    # scratch directory, without held-out evaluation, seeded.
    config = load_config_dict(KG_CONFIG) | {
        "entity_path": str(work / "data"),
        "edge_paths": [str(work / "data" / "train_partitioned")],
        "checkpoint_path": str(work / "model"),  # every run overrides it
        "num_epochs": epochs,
        "eval_fraction": 0,
        "seed": 0,
    }
    path = work / "config.json"
    path.write_text(json.dumps(config, indent=2))
    subprocess.run(
        [str(ours_bin()), "import", str(path), str(UMLS), *TSV_COLUMNS],
        check=True,
        cwd=work,
        env=clean_env(work / "prefect-import"),
        stdout=subprocess.DEVNULL,
    )
    return path


def stack_up(home: Path) -> str:
    """``local-up.sh`` with PREFECT_HOME=``home``; the PREFECT_API_URL of its last stdout line."""
    done = subprocess.run(
        ["bash", str(LOCAL_UP)],
        env=clean_env(home),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise RuntimeError(f"local-up.sh exited with {done.returncode}:\n{done.stderr[-4000:]}")
    key, _, url = done.stdout.strip().splitlines()[-1].partition("=")
    if key != "PREFECT_API_URL" or not url.startswith("http://127.0.0.1:"):
        raise RuntimeError(f"local-up.sh's last line is not PREFECT_API_URL=http://127.0.0.1:N/api: {done.stdout!r}")
    return url


def stack_down(home: Path) -> None:
    """``local-down.sh`` for ``home``; reports (never raises) a failure, so cleanup goes on."""
    done = subprocess.run(
        ["bash", str(LOCAL_DOWN)], env=clean_env(home), cwd=REPO_ROOT, capture_output=True, text=True, timeout=180
    )
    print(done.stderr.strip(), file=sys.stderr)
    if done.returncode != 0:
        print(f"local-down.sh exited with {done.returncode}", file=sys.stderr)
