"""Orchestration overhead: the `pbg` flow vs the same engine calls in a plain loop.

Both sides train the same imported graph (2M edges, 2x2 partitions by default)
with the same config and seed, each in a fresh process and checkpoint
directory:

- ``loop``: the task bodies (``task.fn``) called in a plain Python loop, no Prefect runs;
- ``flow``: the real ``pbg`` flow (ephemeral Prefect API), one subflow per iteration.

In the flow run every call the flow makes (per-bucket tasks, checkpoint tasks,
the iteration subflow) is timed from the caller's side, and every engine method
is timed from the inside; caller time minus engine time is the orchestration
overhead, reported per bucket and per iteration. The loop run gives the
whole-run baseline for the percentage. Prints a table, writes
bench/results/overhead.json.

    .venv/bin/python -m bench.overhead [--quick] [--epochs 2] [--partitions 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.lib.graphs.powerlaw import ensure_graph
from bench.lib.report import format_table, write_json
from bench.lib.tools import REPO_ROOT, TSV_COLUMNS, WORK_DIR, machine_info, ours_bin
from tasks.runs import open_run

ENGINE_METHODS = (
    "schedule_buckets",
    "swap_partitions",
    "load_edges",
    "evaluate",
    "train",
    "finish_bucket",
    "write_checkpoint",
    "switch_version",
    "preserve_version",
    "remove_old_version",
)
BUCKET_TASKS = ("swap_partitions", "load_edges", "evaluate_bucket", "train_bucket", "finish_bucket")
ITERATION_TASKS = ("schedule_buckets", "write_checkpoint", "switch_version", "preserve_version", "remove_old_version")
TARGET_PER_BUCKET_S = 0.100
TARGET_PER_ITERATION_S = 2.5


def write_config(path: Path, data_dir: Path, checkpoint: Path, partitions: int, epochs: int) -> None:
    """A PBG-format config: config A of the speed benchmark on a partitions x partitions grid."""
    path.write_text(f'''def get_torchbiggraph_config():
    return dict(
        entity_path="{data_dir}",
        edge_paths=["{data_dir}/edges"],
        checkpoint_path="{checkpoint}",
        entities={{"node": {{"num_partitions": {partitions}}}}},
        relations=[{{"name": "r0", "lhs": "node", "rhs": "node", "operator": "none"}}],
        dimension=100, global_emb=False, comparator="dot", loss_fn="ranking",
        num_batch_negs=50, num_uniform_negs=50, batch_size=1000, workers=2,
        eval_fraction=0.05, num_epochs={epochs}, seed=0,
    )
''')


class Clock:
    """Accumulates seconds per (iteration, name)."""

    def __init__(self) -> None:
        self.current = -1
        self.seconds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.calls: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def wrap(self, name: str, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[self.current][name] += time.perf_counter() - started
                self.calls[self.current][name] += 1

        return timed


def instrument_engine(clock: Clock) -> None:
    """Time every engine method from the inside."""
    from pbg_core.session.engine import TrainingSession

    for name in ENGINE_METHODS:
        setattr(TrainingSession, name, clock.wrap(f"engine.{name}", getattr(TrainingSession, name)))


def run_loop(config_path: str) -> dict[str, Any]:
    """The same engine calls as the flow, in a plain loop (task bodies via .fn)."""
    from storage.config_loader import load_config
    from tasks import buckets as b
    from tasks import checkpoint as c
    from tasks.plan import plan_training
    from tasks.sessions import close_training_session, open_training_session

    config = load_config(config_path)
    clock = Clock()
    plan = plan_training.fn(open_run(config))
    handle = open_training_session.fn(open_run(config))
    started = time.perf_counter()
    try:
        for iteration in plan.remaining:
            clock.current = iteration.index
            t0 = time.perf_counter()
            for bucket in b.schedule_buckets.fn(handle, iteration):
                b.swap_partitions.fn(handle, bucket)
                b.load_edges.fn(handle, bucket)
                b.evaluate_bucket.fn(handle, "before")
                b.train_bucket.fn(handle)
                b.evaluate_bucket.fn(handle, "after")
                b.finish_bucket.fn(handle)
            for step in (c.write_checkpoint, c.switch_version, c.preserve_version, c.remove_old_version):
                step.fn(handle, iteration)
            clock.seconds[iteration.index]["iteration"] = time.perf_counter() - t0
    finally:
        close_training_session.fn(handle)
    return {
        "mode": "loop",
        "iterations_s": time.perf_counter() - started,
        "per_iteration": {k: dict(v) for k, v in clock.seconds.items()},
    }


def run_flow(config_path: str) -> dict[str, Any]:
    """The real `pbg` flow, with caller-side timing of each call it makes."""
    import flows.train as ft
    from storage.config_loader import load_config

    config = load_config(config_path)
    clock = Clock()
    instrument_engine(clock)
    for name in (*BUCKET_TASKS, *ITERATION_TASKS):
        setattr(ft, name, clock.wrap(f"task.{name}", getattr(ft, name)))
    body = ft._iteration_steps
    ends: list[float] = []
    first_start: list[float] = []

    # The iteration bodies run one after another in the flow's thread, each subflow created once
    # the previous one has ended. An iteration is timed from the previous body's end (the first:
    # its own start) to its body's end: the wall time the run spends on it, the subflow's
    # creation and ending between the bodies included.
    def timed_body(handle: str, iteration: Any, *rest: Any) -> Any:
        clock.current = iteration.index
        if not first_start:
            first_start.append(time.perf_counter())
        try:
            return body(handle, iteration, *rest)
        finally:
            ends.append(time.perf_counter())
            since = ends[-2] if len(ends) > 1 else first_start[0]
            clock.seconds[iteration.index]["iteration"] = ends[-1] - since

    ft._iteration_steps = timed_body
    started = time.perf_counter()
    result = ft.pbg(config=config)
    total = time.perf_counter() - started
    iterations_s = ends[-1] - first_start[0] if ends else 0.0
    return {
        "mode": "flow",
        "total_s": total,
        "iterations_s": iterations_s,
        "version": result["version"],
        "per_iteration": {k: dict(v) for k, v in clock.seconds.items()},
        "calls": {k: dict(v) for k, v in clock.calls.items()},
    }


def overhead_figures(flow: dict[str, Any], buckets_per_iteration: int) -> dict[str, float]:
    """Caller time minus engine time, per bucket and per iteration (means over iterations)."""
    per_bucket, per_iteration = [], []
    engine_of = {
        "swap_partitions": "swap_partitions",
        "load_edges": "load_edges",
        "evaluate_bucket": "evaluate",
        "train_bucket": "train",
    }
    for index, secs in flow["per_iteration"].items():
        if int(index) < 0:
            continue
        bucket_over = sum(secs.get(f"task.{t}", 0.0) - secs.get(f"engine.{e}", 0.0) for t, e in engine_of.items())
        per_bucket.append(bucket_over / buckets_per_iteration)
        engine_total = sum(v for k, v in secs.items() if k.startswith("engine."))
        per_iteration.append(secs["iteration"] - engine_total)
    return {
        "per_bucket_s": sum(per_bucket) / len(per_bucket),
        "per_iteration_s": sum(per_iteration) / len(per_iteration),
    }


def child(mode: str, config_path: str, out: str) -> int:
    """Entry point of the measured child process."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    record = run_loop(config_path) if mode == "loop" else run_flow(config_path)
    Path(out).write_text(json.dumps(record))
    return 0


def spawn(mode: str, config_path: Path, out: Path, prefect_home: Path) -> dict[str, Any]:
    """Run one side in a fresh interpreter and read its record.

    The child's Prefect lives in ``prefect_home``, the benchmark's own: in the user's PREFECT_HOME
    another command's ephemeral server (a test run, a second benchmark) would share the SQLite
    file and its lock, and the flow run would measure that contention.
    """
    cmd = [sys.executable, "-m", "bench.overhead", "--child", mode, "--config", str(config_path), "--out", str(out)]
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(prefect_home)
    subprocess.run(cmd, check=True, cwd=REPO_ROOT, env=env)
    return json.loads(out.read_text())


def prepare(work: Path, graph: Path, partitions: int, epochs: int) -> dict[str, Path]:
    """Both modes' configs (fresh checkpoint directories), and the graph imported once into ``work/data``."""
    data = work / "data"
    configs = {mode: work / f"config_{mode}.py" for mode in ("loop", "flow")}
    for mode, path in configs.items():
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run(["rm", "-rf", str(work / f"ckpt_{mode}")], check=True)
        write_config(path, data, work / f"ckpt_{mode}", partitions, epochs)
    if not (data / "edges" / "edges_0_0.h5").exists():
        subprocess.run(
            [
                str(ours_bin()),
                "import",
                str(configs["loop"]),
                str(graph),
                *TSV_COLUMNS,
            ],
            check=True,
            cwd=REPO_ROOT,
        )
    return configs


def main(argv: list[str] | None = None) -> int:
    """Run the loop and the flow on the same imported graph (or be one of them: --child), compare."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", choices=["loop", "flow"], help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="200k-edge graph instead of 2M")
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.config, args.out)

    edges = 200_000 if args.quick else 2_000_000
    work = WORK_DIR / f"overhead_{edges}_{args.partitions}"
    graph = WORK_DIR / f"graph_200000n_{edges}e_1r.tsv"
    ensure_graph(graph, 200_000, edges, 1, seed=0)
    configs = prepare(work, graph, args.partitions, args.epochs)
    prefect_home = Path(tempfile.mkdtemp(prefix="prefect-", dir=work))
    try:
        loop = spawn("loop", configs["loop"], work / "loop.json", prefect_home)
        flow = spawn("flow", configs["flow"], work / "flow.json", prefect_home)
    finally:
        shutil.rmtree(prefect_home, ignore_errors=True)
    buckets = args.partitions * args.partitions
    figures = overhead_figures(flow, buckets)
    percent = 100.0 * (flow["iterations_s"] - loop["iterations_s"]) / loop["iterations_s"]
    rows = [
        ["iterations (wall, s)", f"{loop['iterations_s']:.2f}", f"{flow['iterations_s']:.2f}", f"{percent:+.1f}%"],
        ["overhead per bucket (s)", "", f"{figures['per_bucket_s']:.3f}", f"target <= {TARGET_PER_BUCKET_S}"],
        ["overhead per iteration (s)", "", f"{figures['per_iteration_s']:.3f}", f"target <= {TARGET_PER_ITERATION_S}"],
        ["flow run incl. Prefect start (s)", "", f"{flow['total_s']:.2f}", ""],
    ]
    print(format_table(["measure", "loop", "flow", "flow vs loop"], rows))
    ok = figures["per_bucket_s"] <= TARGET_PER_BUCKET_S and figures["per_iteration_s"] <= TARGET_PER_ITERATION_S
    print("PASS" if ok else "FAIL")
    write_json(
        "overhead",
        {
            "machine": machine_info(),
            "edges": edges,
            "partitions": args.partitions,
            "epochs": args.epochs,
            "loop": loop,
            "flow": flow,
            "figures": figures,
            "percent": percent,
            "pass": ok,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
