"""Crash test (issue 3): kill -9 ``pbg train`` at many instants on S3, resume every time.

A 2x2-partitioned power-law graph lives on a local S3-compatible server (moto on
127.0.0.1, the same launcher as the tests) with every path of the config on ``s3://``.
The script starts ``pbg train`` in its own process group and, when the run's log
reaches the phase chosen for this kill (swap, training, bucket save, checkpoint write,
pointer switch, old-version removal) plus a random delay, sends SIGKILL to the whole
group (CLI, Prefect's ephemeral server, HOGWILD workers), as a preempted machine would.
After each kill it checks the committed version: every partition and the model of the
version the pointer names load completely. Then it starts the run again. After
``--kills`` kills a last run trains to the end; then the script checks:

- every resume completed (no run failed or hung) and the final checkpoint evaluates;
- the committed version never pointed at missing or partial data;
- lost work per kill: buckets whose training had finished in the killed run but that a
  later run trained again (at most 1: the bucket in flight); the bucket being trained at
  the kill is the in-flight one and is always redone;
- no stats row (keyed by bucket index) appears twice in training_stats.json.

Run: ``.venv/bin/python -m bench.crash [--kills 24] [--epochs 12] [--edges 1000000] [--seed 0]``
(about 10-15 minutes here). Writes bench/results/crash.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.lib import stats
from bench.lib.graphs.powerlaw import ensure_graph
from bench.lib.report import format_table, write_json
from bench.lib.s3_server import S3Server, create_bucket
from bench.lib.tools import REPO_ROOT, TSV_COLUMNS, WORK_DIR, eval_metrics, machine_info, ours_bin
from storage.stats_log import SUMMARY_KEY

# Phase -> (log line that arms the kill, which occurrence in the run, delay range in seconds).
PHASES: dict[str, tuple[str, int, tuple[float, float]]] = {
    "swap": (r"\): swapping partitions", 2, (0.0, 0.05)),
    "train": (r"\): training \d+ edges", 2, (0.02, 0.3)),
    "save": (r"saving its partitions and progress", 2, (0.0, 0.15)),
    "write": (r"writing checkpoint version", 1, (0.0, 0.3)),
    "switch": (r"committing version", 1, (0.0, 0.03)),
    "remove": (r"removing version", 1, (0.0, 0.03)),
}
TRAINED_RE = re.compile(r"(epoch \d+/\d+, path \d+/\d+, chunk \d+/\d+): bucket \((\d+), (\d+)\): trained")
STEP_RE = re.compile(
    r"(swapping partitions|training \d+ edges|trained \d+ edges|saving its partitions|"
    r"writing checkpoint|committing version|removing version)"
)
RUN_TIMEOUT_S = 900


@dataclass
class RunRecord:
    """One ``pbg train`` process: how it ended and what it trained."""

    number: int
    phase: str | None  # the kill's target phase (None: run to the end)
    killed: bool = False
    returncode: int | None = None
    seconds: float = 0.0
    last_step: str = ""
    trained: list[tuple[str, int, int]] = field(default_factory=list)
    committed_after: int = 0
    committed_ok: bool = True
    problem: str = ""


def make_graph(args: argparse.Namespace, work: Path) -> Path:
    """The power-law TSV (cached by size and seed)."""
    tsv = work / f"graph-n{args.nodes}-e{args.edges}-s{args.seed}.tsv"
    ensure_graph(tsv, args.nodes, args.edges, 1, args.seed)
    return tsv


def write_config(work: Path, bucket: str, args: argparse.Namespace) -> Path:
    """A 2x2 config with every path on the S3 bucket."""
    config = {
        "entity_path": f"s3://{bucket}/data/entities",
        "edge_paths": [f"s3://{bucket}/data/edges"],
        "checkpoint_path": f"s3://{bucket}/ckpt",
        "entities": {"node": {"num_partitions": 2}},
        "relations": [{"name": "r0", "lhs": "node", "rhs": "node", "operator": "none"}],
        "dimension": args.dimension,
        "comparator": "dot",
        "loss_fn": "ranking",
        "num_epochs": args.epochs,
        "batch_size": 1000,
        "num_batch_negs": 50,
        "num_uniform_negs": 50,
        "eval_fraction": 0.01,
        "checkpoint_preservation_interval": 3,
        "workers": 2,
        "seed": args.seed,
    }
    path = work / "crash-config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def run_once(
    number: int, config: Path, env: dict[str, str], phase: str | None, rng: random.Random, log_dir: Path
) -> RunRecord:
    """Start ``pbg train``; SIGKILL its process group once ``phase`` is reached (if given)."""
    record = RunRecord(number=number, phase=phase)
    log_path = log_dir / f"run-{number:02d}.log"
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(ours_bin()), "train", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=REPO_ROOT,
        start_new_session=True,
        text=True,
    )
    pattern, occurrence, delay = PHASES[phase] if phase else ("$^", 0, (0.0, 0.0))
    seen = 0
    kill_timer: threading.Timer | None = None

    def kill() -> None:
        record.killed = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    watchdog = threading.Timer(RUN_TIMEOUT_S, kill)
    watchdog.start()
    with open(log_path, "w") as log:
        for line in proc.stdout:
            log.write(line)
            step = STEP_RE.search(line)
            if step:
                record.last_step = re.sub(r"\d+", "N", step.group(1))
            trained = TRAINED_RE.search(line)
            if trained:
                record.trained.append((trained.group(1), int(trained.group(2)), int(trained.group(3))))
            if phase and kill_timer is None and re.search(pattern, line):
                seen += 1
                if seen == occurrence:
                    kill_timer = threading.Timer(rng.uniform(*delay), kill)
                    kill_timer.start()
    proc.wait()
    watchdog.cancel()
    if kill_timer is not None:
        kill_timer.join()
    record.returncode = proc.returncode
    record.seconds = time.monotonic() - started
    if not record.killed and proc.returncode != 0:
        record.problem = f"exited with {proc.returncode}: see {log_path}"
    elif record.killed and phase and kill_timer is None:
        record.problem = "killed by the watchdog (hung)"
    return record


def check_committed(checkpoint_url: str) -> tuple[int, bool, str]:
    """(committed version, whether all its files load, problem)."""
    from storage.checkpoints import CheckpointStore  # local: keeps `--help` fast

    store = CheckpointStore(checkpoint_url)
    version = store.read_version()
    if version == 0:
        return 0, True, ""
    try:
        for part in (0, 1):
            embeddings, optim = store.load_embeddings("node", part, version)
            if embeddings.dim() != 2 or embeddings.shape[0] == 0 or optim is None:
                return version, False, f"partition {part} of version {version} is incomplete"
        store.load_model(version)
    except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
        return version, False, f"version {version} does not load: {exc}"
    return version, True, ""


def lost_work(runs: list[RunRecord]) -> list[int]:
    """Per killed run: buckets it finished training that a later run trained again."""
    lost = []
    for index, run in enumerate(runs):
        if not run.killed:
            continue
        later = {key for other in runs[index + 1 :] for key in other.trained}
        lost.append(sum(1 for key in set(run.trained) if key in later))
    return lost


def duplicate_rows(checkpoint_url: str) -> tuple[int, int]:
    """(rows, duplicated (index, kind) keys) of training_stats.json."""
    keys = collections.Counter(
        (row["index"], "chunk_avg" if SUMMARY_KEY in row else "bucket") for row in stats.read_rows(checkpoint_url)
    )
    return sum(keys.values()), sum(1 for count in keys.values() if count > 1)


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--dimension", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def kill_and_resume(
    args: argparse.Namespace, config: Path, env: dict[str, str], checkpoint_url: str, log_dir: Path
) -> list[RunRecord]:
    """``--kills`` killed runs, then one to the end (stops early if a run finishes unkilled); each checked, printed."""
    rng = random.Random(args.seed)
    phases = list(PHASES)
    runs: list[RunRecord] = []
    for number in range(args.kills + 1):
        phase = phases[number % len(phases)] if number < args.kills else None
        run = run_once(number, config, env, phase, rng, log_dir)
        run.committed_after, run.committed_ok, problem = check_committed(checkpoint_url)
        run.problem = run.problem or problem
        runs.append(run)
        print(
            f"run {number:2d}: target {phase or 'finish':6s} -> {'killed' if run.killed else 'exit'} "
            f"{run.returncode} after {run.seconds:5.1f} s in '{run.last_step}', trained {len(run.trained)}, "
            f"committed v{run.committed_after} {'ok' if run.committed_ok else 'BROKEN'} {run.problem}",
            flush=True,
        )
        if not run.killed and number < args.kills:
            print("the run finished before all kills: raise --epochs", flush=True)
            break
    return runs


def final_checks(
    args: argparse.Namespace, runs: list[RunRecord], config: Path, env: dict[str, str], checkpoint_url: str
) -> tuple[dict[str, Any], bool]:
    """Evaluate the final checkpoint and check the runs (see the module docstring): the checks, and PASS."""
    final = runs[-1]
    eval_out = subprocess.run(
        [str(ours_bin()), "eval", str(config), "--json"], env=env, cwd=REPO_ROOT, capture_output=True, text=True
    )
    metrics = eval_metrics(eval_out.stdout) if eval_out.returncode == 0 else {}
    lost = lost_work(runs)
    rows, duplicated = duplicate_rows(checkpoint_url)
    kills = [r for r in runs if r.killed]
    checks = {
        "kills": len(kills),
        "kills_by_step_reached": dict(collections.Counter(r.last_step for r in kills)),
        "all_resumes_completed": final.returncode == 0 and not final.killed and all(not r.problem for r in runs),
        "committed_always_complete": all(r.committed_ok for r in runs),
        "final_version": final.committed_after,
        "expected_version": args.epochs,
        "max_lost_buckets_per_kill": max(lost, default=0),
        "lost_buckets_per_kill": lost,
        "total_bucket_trainings": sum(len(r.trained) for r in runs),
        "buckets_needed": args.epochs * 4,
        "stats_rows": rows,
        "duplicated_stats_rows": duplicated,
        "final_eval": metrics,
    }
    ok = (
        checks["all_resumes_completed"]
        and checks["committed_always_complete"]
        and final.committed_after == args.epochs
        and checks["max_lost_buckets_per_kill"] <= 1
        and duplicated == 0
        and len(kills) >= min(args.kills, 20)
        and bool(metrics)
    )
    return checks, bool(ok)


def print_checks(checks: dict[str, Any], ok: bool) -> None:
    """The table of checks and the verdict."""
    table = [
        ["kills (target >= 20)", checks["kills"]],
        [
            "steps reached at the kill",
            ", ".join(f"{k} {v}" for k, v in sorted(checks["kills_by_step_reached"].items())),
        ],
        ["every resume completed", checks["all_resumes_completed"]],
        ["committed version always loads", checks["committed_always_complete"]],
        ["final version / expected", f"{checks['final_version']} / {checks['expected_version']}"],
        ["max lost buckets per kill (<= 1)", checks["max_lost_buckets_per_kill"]],
        ["bucket trainings / needed", f"{checks['total_bucket_trainings']} / {checks['buckets_needed']}"],
        ["stats rows / duplicated", f"{checks['stats_rows']} / {checks['duplicated_stats_rows']}"],
        ["final eval mrr", checks["final_eval"].get("mrr")],
        ["status", "PASS" if ok else "FAIL"],
    ]
    print(format_table(["check", "value"], table))


def main() -> int:
    """Parse flags, set up server, data and config, kill and resume, report."""
    args = parse_args()
    work = WORK_DIR / "crash"
    work.mkdir(parents=True, exist_ok=True)
    log_dir = Path(tempfile.mkdtemp(prefix="logs-", dir=work))
    tsv = make_graph(args, work)
    server = S3Server(log_path=work / "moto.log")
    server.start()
    try:
        env = {
            **os.environ,
            **server.env,
            "PREFECT_HOME": tempfile.mkdtemp(prefix="prefect-", dir=work),
            "PBG_CACHE_DIR": tempfile.mkdtemp(prefix="cache-", dir=work),
            # The kills are armed by the engine's step lines (PHASES), which the terminal shows only verbose.
            "PBG_VERBOSE": "1",
        }
        os.environ.update({k: env[k] for k in (*server.env, "PBG_CACHE_DIR")})
        bucket = f"pbg-crash-{args.seed}"
        create_bucket(server.endpoint_url, bucket)
        config = write_config(work, bucket, args)
        print(f"importing {tsv.name} to s3://{bucket}/data ...", flush=True)
        subprocess.run(
            [str(ours_bin()), "import", str(config), str(tsv), *TSV_COLUMNS],
            check=True,
            env=env,
            cwd=REPO_ROOT,
        )
        checkpoint_url = f"s3://{bucket}/ckpt"
        runs = kill_and_resume(args, config, env, checkpoint_url, log_dir)
        checks, ok = final_checks(args, runs, config, env, checkpoint_url)
        print_checks(checks, ok)
        out = write_json(
            "crash",
            {
                "machine": machine_info(),
                "args": vars(args),
                "checks": checks,
                "runs": [vars(r) for r in runs],
                "logs": str(log_dir),
            },
        )
        print(f"wrote {out}")
        return 0 if ok else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
