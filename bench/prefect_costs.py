"""What Prefect itself costs a run, measured on a minimal flow, and what each of our patterns saves.

Each run is a fresh process (bench.prefect_minimal_flow) running a flow of N subflows of K
no-op tasks (default 20 x 9: one training iteration's shape without the work), under four
variants run alternately (``--repeats`` rounds):

- ``prefect``: Prefect's ephemeral mode and default settings;
- ``no-heartbeat``: flow-run heartbeats off (each flow joins its heartbeat thread at its end,
  which sleeps in 1 s steps);
- ``embedded``: our embedded API server (flows/prefect_host/local_server.py), started first;
- ``pipelined``: plus bench/lib/subflow_pipeline.py (each subflow created while the previous body runs).

Reported per variant (medians over the rounds): start-up (spawn -> first subflow body), the gap
between one body's end and the next body's start (what sits between two iterations' training),
shutdown (last body's end -> process exit) and the whole run; plus the ratio to ``prefect``.
Writes bench/results/prefect_costs.json. See docs/prefect-costs.md for what is behind each step.

    .venv/bin/python -m bench.prefect_costs [--repeats 3] [--subflows 20] [--tasks 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.lib.report import format_table, ratio, write_json
from bench.lib.tools import REPO_ROOT, machine_info

VARIANTS = ("prefect", "no-heartbeat", "embedded", "pipelined")
CHILD = "bench.prefect_minimal_flow"  # run as a module of a fresh interpreter, from the repository


def run_once(variant: str, subflows: int, tasks: int, prefect_home: Path) -> dict[str, float]:
    """One fresh process; returns start-up, median gap, shutdown and whole-run seconds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(prefect_home)
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "180"
    spawned = time.time()
    done = subprocess.run(
        [sys.executable, "-m", CHILD, "--variant", variant, "--subflows", str(subflows), "--tasks", str(tasks)],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    ended = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"{variant} run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    marks = json.loads(done.stdout.strip().splitlines()[-1])
    bodies = marks["bodies"]
    gaps = [start - end for (start, _), (_, end) in zip(bodies[1:], bodies[:-1], strict=True)]
    return {
        "startup_s": bodies[0][0] - spawned,
        "gap_s": statistics.median(gaps),
        "gap_mean_s": statistics.mean(gaps),
        "shutdown_s": ended - bodies[-1][1],
        "whole_s": ended - spawned,
    }


def summarize(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Prefect's own costs on a minimal flow, per pattern.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--subflows", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=9)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pbg-prefect-costs-") as home:
        prefect_home = Path(home)
        print("warming up (creates the SQLite database) ...", flush=True)
        run_once("embedded", 2, 1, prefect_home)
        runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
        for round_index in range(args.repeats):
            for variant in VARIANTS:
                runs[variant].append(run_once(variant, args.subflows, args.tasks, prefect_home))
                print(
                    f"round {round_index + 1}/{args.repeats} {variant}: {runs[variant][-1]['whole_s']:.2f} s",
                    flush=True,
                )
    medians = {variant: summarize(results) for variant, results in runs.items()}
    base = medians["prefect"]
    rows = [
        [variant, m["startup_s"], m["gap_s"], m["shutdown_s"], m["whole_s"], ratio(base["whole_s"], m["whole_s"])]
        for variant, m in medians.items()
    ]
    print(
        format_table(
            ["variant", "start-up s", "gap between bodies s", "shutdown s", "whole run s", "faster than prefect x"],
            rows,
        )
    )
    path = write_json(
        "prefect_costs",
        {
            "machine": machine_info(),
            "subflows": args.subflows,
            "tasks": args.tasks,
            "repeats": args.repeats,
            "medians": medians,
            "runs": runs,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
