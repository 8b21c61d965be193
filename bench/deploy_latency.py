"""Deployment latency (issue 4): from `prefect deployment run` to the first training batch.

A local stack (``deployments/local-up.sh``: Prefect server on 127.0.0.1 with SQLite in a
temporary PREFECT_HOME, the ``pbg-local`` process work pool, ``prefect deploy``, a worker polling
every 2 s) trains the bundled UMLS graph (imported with ``pbg import`` into a scratch
directory; 2 epochs, 2 HOGWILD workers) through two paths:

- ``worker``: deployment ``pbg/train`` picked up by the process worker;
- ``serve``: deployment ``pbg/served`` of ``pbg serve --name served`` against the same server
  (its runner polls every ``--serve-poll`` seconds, 2 by default like the worker).

Each path gets one unmeasured warm-up run (imports cached, pool ready), then ``--repeats``
measured runs, each into its own checkpoint directory, each waited to completion. Per run,
t0 is the wall clock right before ``prefect deployment run`` is invoked; from the REST API:

- ``cli_s``: when the CLI returned (it imports Prefect and creates the run);
- ``running_s``: the flow run's ``start_time`` (it entered RUNNING);
- ``first_batch_s``: the earliest log record of the run or its subflows saying "bucket (l, r):
  training N edges on W workers" (pbg_core/session/engine.py logs it right before the first batch).
  Should that INFO line not reach the API, the start of the earliest "train bucket" task run
  stands in for it (that task's body is the call that logs the line); ``first_batch_marker``
  says which, and ``train_task_s`` is always recorded.

PASS when the worker path's largest ``first_batch_s`` is under 30 s. The stack is always
brought down (``deployments/local-down.sh``), on errors and Ctrl-C too. Writes
bench/results/deploy_latency.json.

Run: ``.venv/bin/python -m bench.deploy_latency [--repeats 3] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.deployed_stack import UMLS, clean_env, import_umls, interrupt, stack_down, stack_up
from bench.lib.prefect_api import Api, epoch_s
from bench.lib.report import format_table, write_json
from bench.lib.tools import REPO_ROOT, WORK_DIR, machine_info, ours_bin

TARGET_S = 30.0
UUID_RE = re.compile(r"UUID: ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")
PATHS = {"worker": "pbg/train", "serve": "pbg/served"}


def start_serve(env: dict[str, str], log: Path, poll_s: float) -> subprocess.Popen[bytes]:
    """``pbg serve --name served`` in its own session (so its flow-run children stop with it)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(ours_bin()), "serve", "--name", "served"],
            cwd=REPO_ROOT,
            env={**env, "PREFECT_RUNNER_POLL_FREQUENCY": str(poll_s)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_serve(proc: subprocess.Popen[bytes], grace_s: float = 15) -> None:
    """SIGTERM the serve process group, SIGKILL it after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def measure_run(
    api: Api, env: dict[str, str], deployment: str, config: Path, checkpoint: Path, expected_trains: int
) -> dict[str, Any]:
    """One ``prefect deployment run``, waited to completion; its latencies from t0."""
    overrides = json.dumps([f"checkpoint_path={checkpoint}"])
    argv = [
        str(ours_bin("prefect")),
        "deployment",
        "run",
        deployment,
        "--param",
        f"config_url={config}",
        "--param",
        f"overrides={overrides}",
    ]
    t0 = time.time()
    done = subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    cli_s = time.time() - t0
    found = UUID_RE.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}")
    run_id = found.group(1)
    run = api.wait_done(run_id)
    log_at = api.first_batch_log(run_id)
    task_at = api.first_train_task(run_id, expected_trains)
    first_batch = log_at if log_at is not None else task_at
    if first_batch is None:
        raise RuntimeError(
            f"flow run {run_id}: neither a 'training N edges on W workers' log record nor a "
            "train bucket task run reached the API"
        )
    return {
        "flow_run_id": run_id,
        "checkpoint": str(checkpoint),
        "cli_s": cli_s,
        "running_s": epoch_s(run["start_time"]) - t0,
        "first_batch_s": first_batch - t0,
        "first_batch_marker": "engine log" if log_at is not None else "train bucket task start",
        "train_task_s": None if task_at is None else task_at - t0,
        "completed_s": epoch_s(run["end_time"]) - t0,
    }


def run_path(
    name: str, api: Api, env: dict[str, str], config: Path, work: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """The unmeasured warm-up run, then ``args.repeats`` measured ones, of one path."""
    deployment, repeats = PATHS[name], args.repeats
    trains = args.epochs  # one partition: one bucket, so one "train bucket" task run, per epoch
    print(f"[{name}] warm-up run of {deployment} ...", flush=True)
    warm = measure_run(api, env, deployment, config, work / f"ckpt-{name}-warmup", trains)
    print(f"[{name}] warm-up: first batch after {warm['first_batch_s']:.1f} s (not counted)", flush=True)
    runs = []
    for attempt in range(repeats):
        runs.append(measure_run(api, env, deployment, config, work / f"ckpt-{name}-{attempt}", trains))
        r = runs[-1]
        print(
            f"[{name}] run {attempt + 1}/{repeats}: cli {r['cli_s']:.1f} s, running {r['running_s']:.1f} s, "
            f"first batch {r['first_batch_s']:.1f} s, completed {r['completed_s']:.1f} s",
            flush=True,
        )
    return [{**warm, "warmup": True}, *runs]


def summarize(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median and max of every latency over the measured (non-warm-up) runs."""
    measured = [r for r in runs if not r.get("warmup")]
    out = {}
    for key in ("first_batch_s", "running_s", "cli_s", "completed_s"):
        values = [r[key] for r in measured]
        out[f"{key}_median"], out[f"{key}_max"] = statistics.median(values), max(values)
    return out


def measure_serve(
    api: Api, env: dict[str, str], config: Path, work: Path, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Start ``pbg serve --name served``, wait for its deployment, measure, stop it."""
    log = work / "serve.log"
    proc = start_serve(env, log, args.serve_poll)
    try:
        deadline = time.monotonic() + 180
        while not api.deployment_exists(PATHS["serve"]):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pbg serve did not register {PATHS['serve']}; see {log}")
            time.sleep(1)
        return run_path("serve", api, env, config, work, args)
    finally:
        stop_serve(proc)


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace, load: dict[str, Any]) -> int:
    """Print the table, write the JSON; 0 on PASS."""
    summary = {name: summarize(runs) for name, runs in results.items()}
    ok = summary["worker"]["first_batch_s_max"] < TARGET_S
    rows = [
        [
            name,
            s["first_batch_s_median"],
            s["first_batch_s_max"],
            s["running_s_median"],
            s["running_s_max"],
            s["cli_s_median"],
            s["completed_s_median"],
        ]
        for name, s in summary.items()
    ]
    print(
        format_table(
            [
                "path",
                "1st batch med s",
                "1st batch max s",
                "RUNNING med s",
                "RUNNING max s",
                "CLI med s",
                "completed med s",
            ],
            rows,
        )
    )
    print(
        f"status: {'PASS' if ok else 'FAIL'} (worker path max latency to the first batch "
        f"{summary['worker']['first_batch_s_max']:.1f} s, target < {TARGET_S:.0f} s); "
        f"load average {load['start']} at start, {load['end']} at end (shared CPUs)"
    )
    out = write_json(
        "deploy_latency",
        {
            "machine": machine_info(),
            "args": vars(args),
            "load_average": load,
            "settings": {
                "worker_query_seconds": 2,
                "worker_prefetch_seconds": 5,
                "serve_poll_seconds": args.serve_poll,
                "graph": "UMLS train split",
                "epochs": args.epochs,
                "hogwild_workers": 2,
            },
            "runs": results,
            "summary": summary,
            "target_s": TARGET_S,
            "pass": ok,
        },
    )
    print(f"wrote {out}")
    return 0 if ok else 1


def main() -> int:
    """Parse flags, bring the stack up, measure each path, always bring the stack down."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="measured runs per path (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 measured run, worker path only")
    parser.add_argument("--epochs", type=int, default=2, help="training epochs per run (default 2)")
    parser.add_argument(
        "--serve-poll",
        type=float,
        default=2.0,
        help="PREFECT_RUNNER_POLL_FREQUENCY of `pbg serve` (default 2, the worker's poll)",
    )
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats} is not allowed; give 1 or more")
    if args.quick:
        args.repeats = 1
    signal.signal(signal.SIGTERM, interrupt)
    work_root = WORK_DIR / "deploy_latency"
    shutil.rmtree(work_root, ignore_errors=True)
    work_root.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=work_root))
    home = work / "prefect-home"
    load = {"start": [round(x, 2) for x in os.getloadavg()]}
    print(f"importing {UMLS.relative_to(REPO_ROOT)} into {work / 'data'} ...", flush=True)
    config = import_umls(work, args.epochs)
    print(f"bringing the local stack up (PREFECT_HOME={home}) ...", flush=True)
    try:
        api_url = stack_up(home)
        print(f"stack up: {api_url}", flush=True)
        env = {**clean_env(home), "PREFECT_API_URL": api_url}
        api = Api(api_url)
        results = {"worker": run_path("worker", api, env, config, work, args)}
        if not args.quick:
            results["serve"] = measure_serve(api, env, config, work, args)
    finally:
        print("bringing the local stack down ...", flush=True)
        stack_down(home)
    load["end"] = [round(x, 2) for x in os.getloadavg()]
    return report(results, args, load)


if __name__ == "__main__":
    sys.exit(main())
