"""A LiveJournal-sized graph through `pbg import`, `pbg train` and sampled `pbg eval`, PBG 1.0.0 beside it.

Steps (all under bench/work/livejournal/<graph tag>/, cached where said):
1. Free space first: the bytes the run may still need (bench/lj_setup.bytes_needed) against
   what the file system has; a one-line refusal when short.
2. A seeded LiveJournal-shaped graph (bench/lj_graph.py: 4.85M nodes, 68.5M distinct directed
   edges times ``--scale``, power-law degrees, planted communities of ``--community-size`` nodes
   that hold all but a ``--mix`` share of the edges, no self-loops or duplicates, 1% held-out
   test split), cached by its parameters.
3. ``pbg import`` of both splits with PBG's LiveJournal config at 8 partitions (cached by a
   marker; the import's figures are kept in it).
4. ``pbg train -v`` for one epoch from scratch on local disk (``eval_fraction`` 0 unless
   ``--pbg-eval-fraction``): wall time, epoch time and where it went (bench/lj_stats.py), train
   edges/s, peak memory of the process tree (PSS: shared-memory slots counted once) and bytes written (bench/lj_measure.py) against the
   minimum (every partition written once: nodes x (1024 + 1) x 4 bytes).
5. ``pbg eval CONFIG -p edge_paths=edges/test --sample-edges 10000 --candidates 1000 --json``
   (MRR, Hits@10), if this tree's ``pbg eval`` has those options. Then our checkpoint is removed
   (unless ``--keep-checkpoint``) so PBG's run has the disk.
6. PBG 1.0.0's ``torchbiggraph_train`` on the same files and config, stopped (SIGINT to its
   process group, then SIGTERM, SIGKILL) ``--pbg-seconds`` after its first bucket starts; its
   train edges/s from its own per-bucket log lines. Its checkpoint directory is removed after.

Run: ``python bench/livejournal.py [--scale 1.0] [--pbg-seconds 600] [--skip-pbg]``. Writes
bench/results/livejournal.json (``--scale`` below 1: livejournal_scale<scale>.json).
``--resident-partitions N`` keeps only N partitions in memory (real swaps on a machine that could
hold them all); its logs and JSON get a ``_residentN`` suffix.
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
from pathlib import Path

import lj_graph
import lj_setup
import lj_stats
from _common import WORK_DIR, ToolMissingError, machine_info, measurement_lock, ours_bin, pbg_bin, write_json
from lj_measure import Measured, run_io_measured
from lj_report import print_report

WORK = WORK_DIR / "livejournal"
IMPORT_MARKER = "import.done"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="times LiveJournal's nodes and edges (0.01: a check)")
    parser.add_argument("--seed", type=int, default=0, help="graph seed and our -p seed")
    parser.add_argument("--alpha", type=float, default=0.5, help="power-law exponent of the Chung-Lu weights")
    parser.add_argument("--community-size", type=int, default=1000, help="nodes per planted community (0: none)")
    parser.add_argument("--mix", type=float, default=0.3, help="share of edges whose target ignores communities")
    parser.add_argument("--pbg-seconds", type=float, default=600.0, help="PBG 1.0.0 trains this long, then stops")
    parser.add_argument("--pbg-eval-fraction", action="store_true", help="keep PBG's eval_fraction 0.05 (else 0)")
    parser.add_argument("--hogwild-delay", type=float, default=2.0, help="config value (PBG's file: 2; see README)")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="HOGWILD workers")
    parser.add_argument("--sample-edges", type=int, default=10_000, help="test edges ranked by pbg eval")
    parser.add_argument("--candidates", type=int, default=1000, help="uniform candidates per ranked edge")
    parser.add_argument(
        "--resident-partitions", type=int, help="our config's resident_partitions (default: as many as fit)"
    )
    parser.add_argument("--skip-pbg", action="store_true", help="our side only")
    parser.add_argument("--keep-checkpoint", action="store_true", help="keep our checkpoint (PBG then needs room)")
    parser.add_argument("--lock", type=Path, help="flock this file around every measured command")
    return parser.parse_args(argv)


def suffix(args: argparse.Namespace) -> str:
    """Log and result names of a run with a forced resident count (kept apart from the default run's)."""
    return "" if args.resident_partitions is None else f"_resident{args.resident_partitions}"


def run(
    argv: list[str],
    cwd: Path,
    name: str,
    env: dict[str, str],
    lock: Path | None,
    deadline_s: float | None = None,
    start_marker: str | None = None,
) -> Measured:
    """A measured command under the lock, echoed first; the argv is kept in the result."""
    print(f"$ (cd {cwd} && {' '.join(argv)})", flush=True)
    with measurement_lock(lock):
        return run_io_measured(argv, cwd, name, env=env, deadline_s=deadline_s, start_marker=start_marker)


def command_record(m: Measured) -> dict[str, object]:
    """JSON form of a measured command (the output stays in its log files)."""
    record = dict(vars(m))
    record["ok"] = m.ok
    if not m.ok:
        record["stderr_tail"] = "\n".join(Path(m.stderr_path).read_text(errors="replace").splitlines()[-15:])
    return record


def import_graph(rundir: Path, graph: dict, env: dict[str, str], lock: Path | None) -> dict[str, object]:
    """``pbg import`` both splits into ``rundir`` once; later runs read the marker's figures."""
    marker = rundir / IMPORT_MARKER
    if marker.exists():
        return {**json.loads(marker.read_text()), "cached": True}
    for stale in ("entities", "edges", IMPORT_MARKER):
        shutil.rmtree(rundir / stale, ignore_errors=True)
    argv = [str(ours_bin()), "import", "import_config.py", graph["train"], graph["test"], "-l", "0", "-r", "1"]
    m = run(argv, rundir, "import", env, lock)
    record = {"wall_s": m.wall_s, "peak_rss_bytes": m.peak_rss_bytes, "command": command_record(m)}
    if m.ok:
        marker.write_text(json.dumps(record))
    return {**record, "cached": False}


def train_ours(rundir: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, object]:
    """One epoch from scratch: the command's figures plus the stats rows' and log's breakdown."""
    shutil.rmtree(rundir / "checkpoints", ignore_errors=True)
    argv = [str(ours_bin()), "train", "config.py", "-v", "-p", f"seed={args.seed}"]
    if args.resident_partitions is not None:
        argv += ["-p", f"resident_partitions={args.resident_partitions}"]
    m = run(argv, rundir, "train" + suffix(args), env, args.lock)
    rows = lj_stats.read_rows(rundir / "checkpoints" / "training_stats.json")
    plan = lj_stats.memory_plan(m.text())
    return {
        "command": command_record(m),
        "memory_plan": plan,
        "memory_plan_bytes": plan["total_bytes"] if plan else None,
        "throughput": lj_stats.ours_throughput(rows),
        "epoch": lj_stats.epoch_breakdown(rows, m.text()),
    }


def has_sampled_eval(env: dict[str, str]) -> bool:
    """Whether this tree's ``pbg eval`` takes ``--sample-edges``."""
    done = subprocess.run(
        [str(ours_bin()), "eval", "--help"], capture_output=True, text=True, env={**os.environ, **env}
    )
    return "--sample-edges" in done.stdout


def evaluate(rundir: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, object]:
    """Sampled ranking of the test split: MRR and Hits@10, or why there are none."""
    if not has_sampled_eval(env):
        print("pbg eval has no --sample-edges yet: no MRR / Hits@10", flush=True)
        return {"status": "skipped", "reason": "pbg eval has no --sample-edges yet"}
    argv = [str(ours_bin()), "eval", "config.py", "-p", "edge_paths=edges/test", "--sample-edges"]
    argv += [str(args.sample_edges), "--candidates", str(args.candidates), "--json"]
    m = run(argv, rundir, "eval" + suffix(args), env, args.lock)
    record: dict[str, object] = {"status": "ok" if m.ok else "failed", "command": command_record(m)}
    lines = Path(m.stdout_path).read_text().strip().splitlines()
    if m.ok and lines:
        try:
            metrics = json.loads(lines[-1])
            record.update(metrics=metrics, mrr=metrics.get("mrr"), hits10=metrics.get("r10"))
        except json.JSONDecodeError:
            record.update(status="failed", reason=f"last stdout line is not JSON: {lines[-1][:200]}")
    return record


def train_pbg(rundir: Path, args: argparse.Namespace) -> dict[str, object]:
    """PBG 1.0.0 on our files and config until ``--pbg-seconds`` after its first bucket starts."""
    shutil.rmtree(rundir / "pbg-checkpoints", ignore_errors=True)
    argv = [str(pbg_bin("torchbiggraph_train")), "config.py", "-p", "checkpoint_path=pbg-checkpoints"]
    m = run(argv, rundir, "pbg-train", {}, args.lock, deadline_s=args.pbg_seconds, start_marker="Loading entities")
    throughput = lj_stats.pbg_throughput(m.text())
    finished = "Switching to the new checkpoint version" in m.text()
    shutil.rmtree(rundir / "pbg-checkpoints", ignore_errors=True)  # never needed, frees the disk
    return {"command": command_record(m), "throughput": throughput, "finished_epoch": finished}


def prepare(args: argparse.Namespace) -> tuple[lj_graph.GraphParams, Path, dict[str, int]]:
    """Graph parameters, the run directory (configs written) and the disk estimate."""
    params = lj_graph.scaled(args.scale, args.seed, args.alpha, community_size=args.community_size, mix=args.mix)
    base = WORK / params.tag()
    rundir = base / "run"
    eval_fraction = 0.05 if args.pbg_eval_fraction else 0.0
    for name, paths in (("import_config.py", ["edges/train", "edges/test"]), ("config.py", ["edges/train"])):
        config = lj_setup.config_dict(paths, eval_fraction, args.hogwild_delay, args.workers)
        lj_setup.write_config(rundir / name, config)
    have_graph = (base / "graph" / "graph.json").exists()
    needed = lj_setup.bytes_needed(params.nodes, params.edges, have_graph, (rundir / IMPORT_MARKER).exists())
    return params, rundir, needed


def run_all(args: argparse.Namespace, params: lj_graph.GraphParams, rundir: Path, env: dict[str, str]) -> dict:
    """Every step after the disk check; the JSON payload."""
    started = time.perf_counter()
    graph = lj_graph.ensure_graph(params, rundir.parent / "graph")
    graph["seconds"] = time.perf_counter() - started
    print(f"graph: {json.dumps(graph['summary'])} ({'cached' if graph['cached'] else 'written'})", flush=True)
    result: dict[str, object] = {"graph": graph, "import": import_graph(rundir, graph, env, args.lock)}
    if not result["import"].get("cached") and not result["import"]["command"]["ok"]:
        return {**result, "failed": "import"}
    result["ours"] = train_ours(rundir, args, env)
    result["eval"] = evaluate(rundir, args, env) if result["ours"]["command"]["ok"] else {"status": "skipped"}
    if not args.keep_checkpoint:
        shutil.rmtree(rundir / "checkpoints", ignore_errors=True)
    if not args.skip_pbg:
        result["pbg"] = train_pbg(rundir, args)
    return result


def commands_run(payload: dict) -> list[dict[str, object]]:
    """Every measured command of the run, in order: step, argv, working directory, exit status."""
    steps = (("import", "import"), ("ours train", "ours"), ("eval", "eval"), ("pbg train", "pbg"))
    listed = []
    for step, key in steps:
        record = payload.get(key)
        command = record.get("command") if isinstance(record, dict) else None
        if command:
            cwd = str(Path(command["stdout_path"]).parent)
            listed.append({"step": step, "argv": command["argv"], "cwd": cwd, "returncode": command["returncode"]})
    return listed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ours_bin()
        if not args.skip_pbg:
            pbg_bin("torchbiggraph_train")
    except ToolMissingError as error:
        print(f"livejournal: error: {error}", file=sys.stderr)
        return 1
    params, rundir, needed = prepare(args)
    refusal = lj_setup.check_free_space(rundir, needed)
    if refusal:
        print(refusal, file=sys.stderr)
        return 1
    os.environ.pop("PREFECT_API_URL", None)  # ours uses its embedded server, as `pbg train` by default
    prefect_home = tempfile.mkdtemp(prefix="pbg-livejournal-prefect-")
    try:
        result = run_all(args, params, rundir, {"PREFECT_HOME": prefect_home})
    finally:
        shutil.rmtree(prefect_home, ignore_errors=True)
    payload = {
        "machine": machine_info(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "graph_params": vars(params),
        "config": lj_setup.config_dict(
            ["edges/train"], 0.05 if args.pbg_eval_fraction else 0.0, args.hogwild_delay, args.workers
        ),
        "disk_needed": needed,
        "minimum_bytes_written": lj_setup.checkpoint_version_bytes(result["graph"]["summary"]["distinct_nodes"]),
        **result,
    }
    payload["commands"] = commands_run(payload)
    print_report(payload)
    name = ("livejournal" if args.scale == 1.0 else f"livejournal_scale{args.scale:g}") + suffix(args)
    print(f"wrote {write_json(name, payload)}")
    ours_ok = bool(result.get("ours", {}).get("command", {}).get("ok"))
    return 1 if payload.get("failed") or not ours_ok else 0


if __name__ == "__main__":
    sys.exit(main())
