"""A LiveJournal-sized graph through `pbg import`, `pbg train` and sampled `pbg eval`, PBG 1.0.0 beside it.

Steps (all under bench/work/livejournal/<graph tag>/, cached where said):
1. Free space first: the bytes the run may still need (:func:`bytes_needed`) against
   what the file system has; a one-line refusal when short.
2. A seeded LiveJournal-shaped graph (bench.lib.graphs.chung_lu: 4.85M nodes, 68.5M distinct directed
   edges times ``--scale``, power-law degrees, planted communities of ``--community-size`` nodes
   that hold all but a ``--mix`` share of the edges, no self-loops or duplicates, 1% held-out
   test split), cached by its parameters.
3. ``pbg import`` of both splits with PBG's LiveJournal config at 8 partitions (cached by a
   marker; the import's figures are kept in it).
4. ``pbg train -v`` for one epoch from scratch on local disk (``eval_fraction`` 0 unless
   ``--pbg-eval-fraction``): wall time, epoch time and where it went ("The epoch" below), train
   edges/s, peak memory of the process tree (PSS: shared-memory slots counted once) and bytes written (bench.lib.runner) against the
   minimum (every partition written once: nodes x (1024 + 1) x 4 bytes).
5. ``pbg eval CONFIG -p edge_paths=edges/test --sample-edges 10000 --candidates 1000 --json``
   (MRR, Hits@10), if this tree's ``pbg eval`` has those options. Then our checkpoint is removed
   (unless ``--keep-checkpoint``) so PBG's run has the disk.
6. PBG 1.0.0's ``torchbiggraph_train`` on the same files and config, stopped (SIGINT to its
   process group, then SIGTERM, SIGKILL) ``--pbg-seconds`` after its first bucket starts; its
   train edges/s from its own per-bucket log lines. Its checkpoint directory is removed after.

Run: ``python -m bench.livejournal [--scale 1.0] [--pbg-seconds 600] [--skip-pbg]``. Writes
bench/results/livejournal.json (``--scale`` below 1: livejournal_scale<scale>.json).
``--resident-partitions N`` keeps only N partitions in memory (real swaps on a machine that could
hold them all); its logs and JSON get a ``_residentN`` suffix.

The config. The config is PBG's ``torchbiggraph/examples/configs/livejournal_config.py`` (one entity type
``user_id``, one relation ``follow`` with operator ``none``, dimension 1024, ``global_emb`` False,
lr 0.001, ``hogwild_delay`` 2; left at PBG's defaults: comparator cos, ranking loss, margin 0.1,
batch 1000, 50 batch + 50 uniform negatives, bucket order inside_out) with these changes,
each recorded in the JSON: 8 partitions instead of 1, one epoch instead of 30, paths relative
to the run directory, and ``eval_fraction`` 0 unless ``--pbg-eval-fraction`` keeps PBG's 0.05
(held-out evaluation inside training is not what is measured here, and it costs time on both
sides). Both tools read the same file; only keys PBG 1.0.0 knows go into it.

The epoch. Ours (``pbg train -v``: the engine's step lines, ``HH:MM:SS.mmm | LEVEL | name - message``).
The epoch runs from the first ``bucket (l, r) (1 of N): swapping partitions`` line to
``committing version V`` (the pointer write itself is milliseconds), and is split without
overlap by the step lines of each bucket (swapping -> ``training N edges`` -> ``trained`` ->
the next bucket's swapping, or ``writing checkpoint version V``) and the per-bucket rows of
``<checkpoint_path>/training_stats.json``:
- **train**: ``timing.train`` (HOGWILD compute);
- **partition_swap_step**: swapping -> training, minus ``timing.load_edges`` and
  ``timing.eval_before`` (also listed): partition loads and evicting saves on the training
  thread (or its waits for them when they run behind compute), plus the step's own overhead
  (the Prefect task runs between the two lines);
- **progress_saves**: ``timing.save`` (the save point after a bucket: dirty partitions, model,
  progress record); **eval_after**: ``timing.eval_after``;
- **checkpoint**: ``writing checkpoint version V`` -> ``committing version V``;
- **other**: the epoch minus the above (log lines, bookkeeping, anything unlabelled).
Beside the split, not in its sum, the engine's own counters where its rows carry them:
``io.seconds`` (partition I/O on the training thread; an engine that records the row after
the save point counts the save's partition writes there too), ``io.background_seconds``
(partition I/O done on an I/O thread while buckets train), and any ``timing`` key with
``wait`` in its name. A figure no row or line gives is None ("n/a"), never a guess.

PBG 1.0.0 logs per bucket ``( l , r ): bucket i / n : Processed N edges in T s ( X M/sec );
io: S s ( Y MB/sec )``: ``T`` is its HOGWILD compute time (including ``hogwild_delay``, which every worker but the
first sleeps at every bucket of epoch 0), ``S`` the time before it: partition swap, edge
loading (and held-out evaluation when ``eval_fraction`` > 0).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.lib import stats
from bench.lib.configs import write_config_module
from bench.lib.graphs import chung_lu
from bench.lib.logs import COMMITTING, LOG_LINE, SWAPPING, TRAINED, TRAINING, WRITING, clock_time, pbg_buckets
from bench.lib.quiet import measurement_lock
from bench.lib.report import format_table, ratio, write_json
from bench.lib.runner import Deadline, RunResult, run_measured, tail
from bench.lib.tools import WORK_DIR, ToolMissingError, eval_metrics, machine_info, ours_bin, pbg_bin

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
    parser.add_argument(
        "--hogwild-delay", type=float, default=2.0, help="config value (PBG's file: 2; see docs/benchmarks.md)"
    )
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


# ---- the config and the disk check -----------------------------------------------------------
PARTITIONS = 8
DIMENSION = 1024


def config_dict(edge_paths: list[str], eval_fraction: float, hogwild_delay: float, workers: int | None) -> dict:
    """PBG's LiveJournal config with this benchmark's changes (see the module docstring)."""
    config: dict[str, object] = {
        "entity_path": "entities",
        "edge_paths": edge_paths,
        "checkpoint_path": "checkpoints",
        "entities": {"user_id": {"num_partitions": PARTITIONS}},
        "relations": [{"name": "follow", "lhs": "user_id", "rhs": "user_id", "operator": "none"}],
        "dimension": DIMENSION,
        "global_emb": False,
        "num_epochs": 1,
        "lr": 0.001,
        "hogwild_delay": hogwild_delay,
        "comparator": "cos",
        "loss_fn": "ranking",
        "margin": 0.1,
        "batch_size": 1000,
        "num_batch_negs": 50,
        "num_uniform_negs": 50,
        "bucket_order": "inside_out",
        "eval_fraction": eval_fraction,
    }
    if workers is not None:
        config["workers"] = workers
    return config


def write_config(path: Path, config: dict) -> None:
    """``get_torchbiggraph_config()`` returning ``config``, rewritten only when it changes."""
    docstring = (
        "Written by bench.livejournal: PBG's livejournal_config.py with 8 partitions, 1 epoch,\n"
        "relative paths and the eval_fraction of the run (see bench/livejournal.py)."
    )
    write_config_module(path, docstring, config)


def checkpoint_version_bytes(nodes: int) -> int:
    """One checkpoint version: every embedding row plus its row-Adagrad state, float32."""
    return nodes * (DIMENSION + 1) * 4


def bytes_needed(nodes: int, edges: int, have_graph: bool, have_import: bool) -> dict[str, int]:
    """Disk the run may still need, by item (estimates, rounded up; docs/benchmarks.md, "bench.livejournal").

    - TSV: at most 16 bytes per edge (two ids of up to 7 digits, a tab, a newline);
    - imported edges: 24 bytes per edge (measured: lhs, rhs and relation, int64), plus as much
      again for the importer's staging;
    - our checkpoint: two versions' worth of every partition (the one being written, and the
      committed one or, in a first epoch, the last save point's saves in the progress area,
      deleted only once the pass's last bucket has saved everything under the version's names),
      plus two partitions in flight;
    - PBG's run writes into its own checkpoint directory after ours is removed, so it needs
      at most one version, which the two above already cover.
    """
    version = checkpoint_version_bytes(nodes)
    return {
        "tsv": 0 if have_graph else 16 * edges,
        "imported_edges": 0 if have_import else 2 * 24 * edges,
        "checkpoint_two_versions": 2 * version,
        "partitions_in_flight": 2 * version // PARTITIONS,
    }


def check_free_space(directory: Path, needed: dict[str, int]) -> str | None:
    """None if ``directory``'s file system has room for ``sum(needed)``, else the one-line refusal."""
    directory.mkdir(parents=True, exist_ok=True)
    free, total = shutil.disk_usage(directory).free, sum(needed.values())
    if free >= total:
        return None
    return (
        f"livejournal: not enough disk under {directory}: {total / 1e9:.1f} GB needed "
        f"({', '.join(f'{k} {v / 1e9:.1f} GB' for k, v in needed.items())}), {free / 1e9:.1f} GB free"
    )


def run(
    argv: list[str],
    cwd: Path,
    name: str,
    env: dict[str, str],
    lock: Path | None,
    deadline_s: float | None = None,
    start_marker: str | None = None,
) -> RunResult:
    """A measured command under the lock, echoed first; the argv is kept in the result."""
    print(f"$ (cd {cwd} && {' '.join(argv)})", flush=True)
    with measurement_lock(lock):
        deadline = Deadline(deadline_s, start_marker=start_marker) if deadline_s is not None else None
        return run_measured(argv, cwd, name, env=env, sample_interval=0.5, io=True, own_group=True, deadline=deadline)


COMMAND_FIELDS = (
    "argv",
    "returncode",
    "wall_s",
    "peak_rss_bytes",
    "peak_pss_bytes",
    "write_bytes",
    "cancelled_write_bytes",
    "write_bytes_method",
    "stdout_path",
    "stderr_path",
    "signals",
    "leftover_pids",
    "leftovers",
)


def command_record(m: RunResult) -> dict[str, object]:
    """JSON form of a measured command (the output stays in its log files)."""
    record: dict[str, object] = {name: getattr(m, name) for name in COMMAND_FIELDS}
    record["ok"] = m.ok
    if not m.ok:
        record["stderr_tail"] = tail(m.stderr, 15)
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
    rows = stats.bucket_rows(rundir / "checkpoints")
    plan = memory_plan(m.text())
    return {
        "command": command_record(m),
        "memory_plan": plan,
        "memory_plan_bytes": plan["total_bytes"] if plan else None,
        "throughput": ours_throughput(rows),
        "epoch": epoch_breakdown(rows, m.text(), m.started_at),
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
    if m.ok and m.stdout.strip():
        try:
            metrics = eval_metrics(m.stdout)
            record.update(metrics=metrics, mrr=metrics.get("mrr"), hits10=metrics.get("r10"))
        except ValueError as error:
            record.update(status="failed", reason=str(error))
    return record


def train_pbg(rundir: Path, args: argparse.Namespace) -> dict[str, object]:
    """PBG 1.0.0 on our files and config until ``--pbg-seconds`` after its first bucket starts."""
    shutil.rmtree(rundir / "pbg-checkpoints", ignore_errors=True)
    argv = [str(pbg_bin("torchbiggraph_train")), "config.py", "-p", "checkpoint_path=pbg-checkpoints"]
    m = run(argv, rundir, "pbg-train", {}, args.lock, deadline_s=args.pbg_seconds, start_marker="Loading entities")
    throughput = pbg_throughput(m.text())
    finished = "Switching to the new checkpoint version" in m.text()
    shutil.rmtree(rundir / "pbg-checkpoints", ignore_errors=True)  # never needed, frees the disk
    return {"command": command_record(m), "throughput": throughput, "finished_epoch": finished}


def prepare(args: argparse.Namespace) -> tuple[chung_lu.GraphParams, Path, dict[str, int]]:
    """Graph parameters, the run directory (configs written) and the disk estimate."""
    params = chung_lu.scaled(args.scale, args.seed, args.alpha, community_size=args.community_size, mix=args.mix)
    base = WORK / params.tag()
    rundir = base / "run"
    eval_fraction = 0.05 if args.pbg_eval_fraction else 0.0
    for name, paths in (("import_config.py", ["edges/train", "edges/test"]), ("config.py", ["edges/train"])):
        config = config_dict(paths, eval_fraction, args.hogwild_delay, args.workers)
        write_config(rundir / name, config)
    have_graph = (base / "graph" / "graph.json").exists()
    needed = bytes_needed(params.nodes, params.edges, have_graph, (rundir / IMPORT_MARKER).exists())
    return params, rundir, needed


def run_all(args: argparse.Namespace, params: chung_lu.GraphParams, rundir: Path, env: dict[str, str]) -> dict:
    """Every step after the disk check; the JSON payload."""
    started = time.perf_counter()
    graph = chung_lu.ensure_graph(params, rundir.parent / "graph")
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
    refusal = check_free_space(rundir, needed)
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
        "config": config_dict(
            ["edges/train"], 0.05 if args.pbg_eval_fraction else 0.0, args.hogwild_delay, args.workers
        ),
        "disk_needed": needed,
        "minimum_bytes_written": checkpoint_version_bytes(result["graph"]["summary"]["distinct_nodes"]),
        **result,
    }
    payload["commands"] = commands_run(payload)
    print_report(payload)
    name = ("livejournal" if args.scale == 1.0 else f"livejournal_scale{args.scale:g}") + suffix(args)
    print(f"wrote {write_json(name, payload)}")
    ours_ok = bool(result.get("ours", {}).get("command", {}).get("ok"))
    return 1 if payload.get("failed") or not ours_ok else 0


# ---- the epoch, from our stats rows and step lines; PBG 1.0.0's bucket lines ------------------
STEPS = (("swap", SWAPPING), ("train", TRAINING), ("trained", TRAINED), ("writing", WRITING), ("commit", COMMITTING))


def step_events(text: str, spawn: float | None = None) -> list[tuple[str, float]]:
    """(step, epoch seconds) of the engine's step lines from the first bucket's swap on.

    Each dateless clock time is placed within 12 hours of the line before it (the first one's
    of ``spawn``, default now), so a pass across midnight keeps its order.
    """
    events: list[tuple[str, float]] = []
    anchor = time.time() if spawn is None else spawn
    for line in text.splitlines():
        match = LOG_LINE.match(line)
        if not match or match["logger"] is None:
            continue
        for step, pattern in STEPS:
            found = pattern.search(match["message"])
            if not found:
                continue
            if step == "swap" and found.group(3) == "1":
                events = []  # the pass starts (again, after a resumed or repeated first bucket)
            anchor = clock_time(match["clock"], anchor)
            events.append((step, anchor))
            break
    return events


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else end - start


def log_spans(text: str, spawn: float | None = None) -> dict[str, float | None]:
    """Epoch, swapping -> training (summed over buckets) and checkpoint seconds from the step lines."""
    events = step_events(text, spawn)
    first = {step: when for step, when in reversed(events)}
    last = dict(events)
    before_train, swap_at = 0.0, None
    for step, when in events:
        if step == "swap":
            swap_at = when
        elif step == "train" and swap_at is not None:
            before_train += when - swap_at
            swap_at = None
    return {
        "epoch": _span(first.get("swap"), last.get("commit")),
        "swap_to_train": before_train if "train" in first else None,
        "checkpoint": _span(last.get("writing"), last.get("commit")),
    }


def _minus(total: float | None, *parts: float | None) -> float | None:
    return None if total is None else total - sum(p for p in parts if p is not None)


def epoch_breakdown(rows: list[dict], log_text: str, spawn: float | None = None) -> dict[str, object]:
    """Epoch seconds, its non-overlapping parts and their shares, and the engine's own counters."""
    spans = log_spans(log_text, spawn)
    epoch = spans["epoch"]
    load, eval_before = stats.total(rows, "timing", "load_edges"), stats.total(rows, "timing", "eval_before")
    parts: dict[str, float | None] = {
        "train": stats.total(rows, "timing", "train"),
        "partition_swap_step": _minus(spans["swap_to_train"], load, eval_before),
        "load_edges": load,
        "eval_before": eval_before,
        "progress_saves": stats.total(rows, "timing", "save"),
        "eval_after": stats.total(rows, "timing", "eval_after"),
        "checkpoint": spans["checkpoint"],
    }
    parts["other"] = _minus(epoch, *parts.values())
    wait_keys = sorted({k for row in rows for k in row.get("timing", {}) if "wait" in k})
    counters = {
        "io.seconds": stats.total(rows, "io", "seconds"),
        "io.background_seconds": stats.total(rows, "io", "background_seconds"),
        **{f"timing.{k}": stats.total(rows, "timing", k) for k in wait_keys},
    }
    return {
        "epoch_s": epoch,
        "swap_to_train_s": spans["swap_to_train"],  # beside PBG's per-bucket "io: S s"
        "seconds": parts,
        "share": {k: (v / epoch if v is not None and epoch else None) for k, v in parts.items()},
        "engine_counters": counters,
        "engine_counter_share": {k: (v / epoch if v is not None and epoch else None) for k, v in counters.items()},
    }


def ours_throughput(rows: list[dict]) -> dict[str, object]:
    """Train edges, compute seconds (timing.train) and edges/s; engine partition I/O bytes."""
    edges = stats.edges(rows)
    seconds = stats.total(rows, "timing", "train")
    return {
        "buckets": len(rows),
        "edges": edges,
        "compute_s": seconds,
        "edges_per_s": edges / seconds if seconds else None,
        "swap_bytes_written": stats.total(rows, "io", "bytes_written"),
        "swap_bytes_read": stats.total(rows, "io", "bytes_read"),
    }


def pbg_throughput(log_text: str) -> dict[str, object]:
    """PBG 1.0.0's buckets, edges, compute seconds and edges/s from its per-bucket lines."""
    buckets = [(edges, seconds, io_s) for edges, seconds, io_s in pbg_buckets(log_text) if io_s is not None]
    edges, seconds = sum(b[0] for b in buckets), sum(b[1] for b in buckets)
    return {
        "buckets": len(buckets),
        "edges": edges,
        "compute_s": seconds,
        "io_s": sum(b[2] for b in buckets),
        "edges_per_s": edges / seconds if seconds else None,
        "source": "PBG log 'Processed N edges in T s ... io: S s' per bucket",
    }


PLAN_LINE = re.compile(
    r"memory plan: (?P<resident>\d+) of (?P<partitions>\d+) partitions resident \+ (?P<in_flight>\d+) in flight"
    r".*= (?P<total>[0-9.]+) GB of (?P<available>[0-9.]+) GB available"
)


def memory_plan(log_text: str) -> dict[str, object] | None:
    """The memory plan our ``pbg train`` logged: resident and in-flight slots, bound in bytes."""
    found = PLAN_LINE.search(log_text)
    if found is None:
        return None
    return {
        "resident": int(found["resident"]),
        "partitions": int(found["partitions"]),
        "in_flight": int(found["in_flight"]),
        "total_bytes": round(float(found["total"]) * 1e9),  # describe() prints decimal GB
        "available_bytes": round(float(found["available"]) * 1e9),
        "line": found[0],
    }


# ---- the tables --------------------------------------------------------------------------------
NA = "n/a"


def _get(record: dict | None, *keys: str) -> object:
    """``record[k1][k2]...`` or None when any level is missing."""
    value: object = record
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _gib(num: object) -> object:
    return num / 2**30 if isinstance(num, int | float) else None


def _na(value: object) -> object:
    return NA if value is None else value


def side_rows(payload: dict) -> list[list[object]]:
    """One row per figure: ours, PBG 1.0.0, ours/PBG where both exist."""
    ours, pbg, imp = payload.get("ours"), payload.get("pbg"), payload.get("import")
    ours_eps, pbg_eps = _get(ours, "throughput", "edges_per_s"), _get(pbg, "throughput", "edges_per_s")
    written = _get(ours, "command", "write_bytes")
    minimum = payload.get("minimum_bytes_written")
    rows = [
        ["import wall (s)", _get(imp, "wall_s"), None, None],
        ["train command wall (s)", _get(ours, "command", "wall_s"), _get(pbg, "command", "wall_s"), None],
        ["epoch (s)", _get(ours, "epoch", "epoch_s"), None, None],
        ["buckets trained", _get(ours, "throughput", "buckets"), _get(pbg, "throughput", "buckets"), None],
        ["edges trained", _get(ours, "throughput", "edges"), _get(pbg, "throughput", "edges"), None],
        ["compute (s)", _get(ours, "throughput", "compute_s"), _get(pbg, "throughput", "compute_s"), None],
        ["bucket start -> training (s)", _get(ours, "epoch", "swap_to_train_s"), _get(pbg, "throughput", "io_s"), None],
        ["train edges/s", ours_eps, pbg_eps, ratio(ours_eps, pbg_eps)],
        [
            "peak tree RSS (GiB)",
            _gib(_get(ours, "command", "peak_rss_bytes")),
            _gib(_get(pbg, "command", "peak_rss_bytes")),
            None,
        ],
        [
            "peak tree PSS (GiB)",
            _gib(_get(ours, "command", "peak_pss_bytes")),
            _gib(_get(pbg, "command", "peak_pss_bytes")),
            None,
        ],
        ["memory plan (GiB)", _gib(_get(ours, "memory_plan_bytes")), None, None],
        ["bytes written (GiB)", _gib(written), _gib(_get(pbg, "command", "write_bytes")), None],
        ["minimum bytes (GiB)", _gib(minimum), None, None],
        ["written / minimum", ratio(written, minimum), None, None],
        ["MRR (sampled)", _get(payload, "eval", "mrr"), None, None],
        ["Hits@10 (sampled)", _get(payload, "eval", "hits10"), None, None],
    ]
    return [[name, *(_na(v) for v in values)] for name, *values in rows]


def epoch_rows(payload: dict) -> list[list[object]]:
    """Seconds and share of our epoch per part, then the engine's own counters (n/a: not recorded)."""
    epoch = _get(payload, "ours", "epoch") or {}
    seconds, share = epoch.get("seconds", {}), epoch.get("share", {})
    rows = [[part, _na(seconds.get(part)), _na(share.get(part))] for part in seconds]
    rows.append(["epoch", _na(epoch.get("epoch_s")), 1.0 if epoch.get("epoch_s") else NA])
    counters, counter_share = epoch.get("engine_counters", {}), epoch.get("engine_counter_share", {})
    rows += [[f"({name}, not in the sum)", _na(v), _na(counter_share.get(name))] for name, v in counters.items()]
    return rows


def print_report(payload: dict) -> None:
    """Print the two tables and the notes the figures need."""
    print()
    print(format_table(["figure", "ours", "PBG 1.0.0", "ours/PBG"], side_rows(payload)))
    print()
    print(format_table(["our epoch", "seconds", "share"], epoch_rows(payload)))
    notes = [
        f"eval: {_get(payload, 'eval', 'reason')}" if _get(payload, "eval", "reason") else None,
        f"eval failed:\n{_get(payload, 'eval', 'command', 'stderr_tail')}"
        if _get(payload, "eval", "status") == "failed" and _get(payload, "eval", "command", "stderr_tail")
        else None,
        "import wall: from the earlier run that made this import (cached)"
        if _get(payload, "import", "cached")
        else None,
        "bytes written: " + str(_get(payload, "ours", "command", "write_bytes_method")),
        f"PBG stopped: {_get(payload, 'pbg', 'command', 'signals')}; finished its epoch: "
        f"{_get(payload, 'pbg', 'finished_epoch')}; left running afterwards (killed): "
        f"{_get(payload, 'pbg', 'command', 'leftovers')}"
        if payload.get("pbg")
        else None,
        "load-ahead / save-behind: this engine records neither io.background_seconds nor a timing key with 'wait'"
        if _get(payload, "ours", "epoch", "engine_counters", "io.background_seconds") is None
        and _get(payload, "ours", "epoch") is not None
        else None,
    ]
    for note in notes:
        if note:
            print(f"note: {note}")


if __name__ == "__main__":
    sys.exit(main())
