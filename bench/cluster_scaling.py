"""One machine vs two Dask workers on one planted graph: link-prediction parity, then scaling.

One seeded graph with planted communities (bench.lib.graphs.chung_lu: directed Chung-Lu, power-law
degrees, communities of ``--community-size`` nodes holding all but a ``--mix`` share of the
edges, no self-loops or duplicates): 400k nodes, 8.0M training edges and a 1% held-out test
split (80.8k edges), imported once with ``pbg import`` into 4 partitions of one entity type (a
4x4 bucket grid of about 500k edges per bucket, so that a bucket's hand-out and recording do not
dominate its compute). Everything lives under bench/work/distributed/<graph tag>/ (graph and
import cached by their parameters and a marker).

1. **Quality parity**: the same config (d=100, dot comparator, softmax loss, lr 0.1, one relation
   with operator ``--operator``, default ``diagonal``, so that every bucket changes parameters
   the machines share, 50 batch + 50 uniform negatives, ``eval_fraction`` 0, 3 epochs) trained
   from scratch per seed with ``num_machines`` 1 (``workers`` unset: all usable cores), 2 (a
   local Dask cluster the flow starts; each machine ``cores // 2`` HOGWILD trainers) and 2 with
   ``distributed_shared_merge: average`` instead of the default delta, then ``pbg eval
   --filtered`` of the test split with ``all_negs`` (every entity of the true entity's
   partition is a candidate, as PBG ranks; train and test edges filtered). Bar: |mean MRR of 2
   machines (delta) - mean MRR of 1 machine| <= 0.01; average - delta is reported beside it. A
   finished seed's record is kept in its run directory and reused by a later invocation with the
   same commands (``--rerun`` trains again): the quality part is resumable.
2. **Scaling**: ``workers: 1`` everywhere, seed 0, never cached; ``--repeats`` rounds, each of
   1 machine, then 2 machines, then (unless ``--skip-ceiling``) the **ceiling pair**: two
   1-machine trainings with the same config and seed started at the same moment (one quiet wait
   before both), each into its own run directory and on its own new PREFECT_HOME (two commands
   starting together on one new PREFECT_HOME both run Prefect's database migrations). Each
   such home is a copy of one template home on which ``prefect server database upgrade`` ran
   once, unmeasured, before the first round: a new home's migrations would otherwise land in
   the pair's wall times and not in the 1-machine run's. Per run, from the stats rows:
   ``train_edges_per_s`` = sum of ``stats.count`` / sum of ``timing.train`` (one trainer's rate
   inside its buckets), ``aggregate_train_edges_per_s`` = the same edges / (that sum /
   ``num_machines``) (all machines' in-bucket rate together), and ``whole_run_edges_per_s`` =
   the same edges / the whole ``pbg train`` command's wall time (start-up and shutdown
   included). Figures, per round and (in the summary) from the medians over rounds:
   - ``aggregate_train_rate_ratio``: 2 machines' aggregate rate / 1 machine's (= (edges /
     (sum of timing.train / 2)) / (edges / sum of timing.train)). **The bar is on this one:
     >= 1.7x**, from the medians over rounds of each setting's rate (``passed``);
   - ``whole_run_speedup``: the ratio of the whole-run rates; ``per_bucket_rate_ratio``: the
     ratio of the one-trainer rates (both reported beside the bar, as ratios of the medians);
   - ``ceiling_per_trainer_ratio``: the pair's mean ``train_edges_per_s`` / that of the round's
     1-machine run alone: how much two trainers slow each other on this machine's cores with no
     Dask and no shared state (the hardware ceiling for a machine's rate);
   - ``ceiling_throughput_ratio``: (the pair's edges together, 2 x one run's, over the wall of
     the slower of the pair) / (edges / wall of the round's 1-machine run): what two fully
     independent jobs reach end to end. The summary's two ceiling figures are medians of the rounds' ratios.
   Per epoch, bytes read and written (sum of ``io.bytes_read`` / ``io.bytes_written`` over the
   epoch's bucket rows) against the minimum: every partition's embeddings and Adagrad state
   (rows x (dimension + 1) x 4 bytes) read once and written once; the report prints, per kind
   of run (quality and scaling 1 and 2 machines, ceiling pair), the median bytes read and
   written per epoch as multiples of that minimum. The committed partition files' sizes are
   recorded beside it.
3. For every run: the mean of each ``timing`` field over the bucket rows, the bucket time (the
   sum of a row's timing fields) per machine, the **gap**: wall time minus the sum of all bucket
   times divided by ``num_machines`` (what is not inside a bucket on an average machine:
   start-up, cluster start, machine build, bucket hand-out and recording, idle machines,
   checkpoint commits, shutdown), and the wall time cut at the log lines
   (:func:`log_phases`).

Every command runs through bench.lib.runner.run_measured (via bench.lib.quiet.run_together) (wall time spawn -> exit, peak RSS of the
process tree, logs next to the run) with one temporary PREFECT_HOME for the whole script (the
ceiling pair excepted, see 2.; ``PREFECT_API_URL`` dropped: ``pbg`` uses its embedded server, as
by default); an unmeasured one-epoch warm-up on 2 machines trains before the first measured run.
The machine is shared: before each command (each ceiling pair) the script waits
(``--quiet-wait``, default at most 300 s) for it to be idle over 2 x 3 s, and records the CPU
seconds other people's processes took during the command (during the pair, from the first spawn
to the last exit).

The module reads top to bottom: the command line, set-up and files, the measured commands and
one training's record, the quality part, the ceiling pair and the scaling part, what a finished
run's stats rows, log and files say, and the tables.

Run: ``python -m bench.cluster_scaling [--quick] [--skip-quality] [--skip-scaling] [--skip-ceiling]
[--seeds 0,1,2] [--epochs 3] [--dimension 100] [--repeats 2] [--rerun] [--quiet-wait 300]
[--lock PATH]``. Writes bench/results/cluster_scaling.json (``--quick``: cluster_scaling_quick.json;
20k nodes, 202k train edges, 1 seed, 2 epochs, 1 round). Exit status 1 if a command failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

from bench.lib import stats
from bench.lib.configs import write_if_changed
from bench.lib.graphs import chung_lu
from bench.lib.logs import LOG_LINE, TRAINED, clock_time
from bench.lib.quiet import Job, run_together
from bench.lib.report import format_table, mib, ratio, write_json
from bench.lib.runner import RunResult, tail
from bench.lib.tools import WORK_DIR, ToolMissingError, eval_metrics, machine_info, ours_bin

# Full: 7,999,200 train and 80,800 test edges (1%), buckets of about 500k edges: long enough
# (about 1.5 s for one trainer at d=100) that a bucket's hand-out and recording do not dominate.
FULL = {"nodes": 400_000, "edges": 8_080_000, "repeats": 2}
QUICK = {"nodes": 20_000, "edges": 204_000, "repeats": 1}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200k edges, 1 seed, 2 epochs: a smoke run")
    parser.add_argument("--skip-quality", action="store_true", help="no quality-parity part")
    parser.add_argument("--skip-scaling", action="store_true", help="no scaling part")
    parser.add_argument(
        "--skip-ceiling", action="store_true", help="no ceiling pair (two 1-machine runs at once) in the scaling rounds"
    )
    parser.add_argument("--seeds", help="comma-separated training seeds (default 0,1,2; --quick: 0)")
    parser.add_argument("--epochs", type=int, help="num_epochs of every run (default 3; --quick: 2)")
    parser.add_argument("--dimension", type=int, default=100, help="embedding dimension")
    parser.add_argument(
        "--operator", default="diagonal", help="the relation's operator (default diagonal: shared parameters to merge)"
    )
    parser.add_argument("--lr", type=float, default=0.1, help="Adagrad learning rate")
    parser.add_argument("--nodes", type=int, help="graph nodes (default 400k; --quick: 20k)")
    parser.add_argument("--edges", type=int, help="distinct edges, test split included (default 8.08M; --quick: 204k)")
    parser.add_argument("--test-fraction", type=float, default=0.01, help="share of edges held out for eval")
    parser.add_argument("--community-size", type=int, default=100, help="nodes per planted community")
    parser.add_argument("--mix", type=float, default=0.3, help="share of edges whose target ignores communities")
    parser.add_argument("--graph-seed", type=int, default=0, help="seed of the graph")
    parser.add_argument(
        "--repeats",
        type=int,
        help="scaling rounds, 1 then 2 machines then the ceiling pair each (default 2; --quick: 1)",
    )
    parser.add_argument("--rerun", action="store_true", help="train the quality seeds again even if recorded")
    parser.add_argument("--lock", type=Path, help="flock this file around every measured command")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=300.0,
        help="before each measured command wait up to this many s for the machine to be idle (0: never)",
    )
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    args.nodes = args.nodes or size["nodes"]
    args.edges = args.edges or size["edges"]
    args.repeats = args.repeats or size["repeats"]
    args.epochs = args.epochs or (2 if args.quick else 3)
    args.seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1,2")).split(",") if s]
    if args.skip_quality and args.skip_scaling:
        parser.error("--skip-quality and --skip-scaling: nothing to run")
    return args


def setup_of(args: argparse.Namespace) -> Setup:
    return Setup(
        nodes=args.nodes,
        edges=args.edges,
        test_fraction=args.test_fraction,
        community_size=args.community_size,
        mix=args.mix,
        alpha=0.5,
        graph_seed=args.graph_seed,
        dimension=args.dimension,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=1000,
        num_batch_negs=50,
        num_uniform_negs=50,
        operator=args.operator,
    )


def run_parts(
    payload: dict[str, Any],
    base: Path,
    setup: Setup,
    configs: tuple[Path, Path],
    args: argparse.Namespace,
    env: dict[str, str],
) -> bool:
    """Import, warm-up, the quality and scaling parts, each into ``payload``; True if a command failed."""
    import_config, config = configs
    payload["import"] = imported = import_graph(base, payload["graph"], import_config, env, args.lock)
    if not imported.get("cached") and not imported.get("ok"):
        return True
    counts = entity_counts(base)
    minimum = sum(counts) * (setup.dimension + 1) * 4
    payload.update(partition_rows=counts, minimum_bytes_per_epoch=minimum)
    quality_to_train = not args.skip_quality and any(
        cached_quality(base, config, s, seed, args)[1] is None for seed in args.seeds for s in SETTINGS
    )
    if quality_to_train or not args.skip_scaling:
        payload["warm_up"] = warm_up(base, config, env, args.lock)
    if not args.skip_quality:
        payload["quality"] = run_quality(base, config, minimum, args, env)
    if not args.skip_scaling:
        payload["scaling"] = run_scaling(base, config, minimum, args, env)
    return any(not r.get("ok") or (r.get("eval") and not r["eval"].get("ok")) for r in all_runs(payload))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ours_bin()
    except ToolMissingError as error:
        print(f"cluster_scaling: error: {error}", file=sys.stderr)
        return 1
    QUIET["max_wait_s"] = args.quiet_wait
    setup = setup_of(args)
    params = graph_params(setup)
    base = WORK / params.tag()
    started = time.perf_counter()
    graph = chung_lu.ensure_graph(params, base / "graph")
    graph["seconds"] = time.perf_counter() - started
    print(f"graph: {json.dumps(graph['summary'])} ({'cached' if graph['cached'] else 'written'})", flush=True)
    import_config, config = write_configs(base, setup)
    os.environ.pop("PREFECT_API_URL", None)  # the embedded server, as `pbg train` by default
    prefect_home = tempfile.mkdtemp(prefix="pbg-distributed-prefect-")
    env = {"PREFECT_HOME": prefect_home}
    payload: dict[str, Any] = {
        "machine": machine_info(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "setup": asdict(setup),
        "graph_params": asdict(params),
        "graph": graph,
        "config": json.loads(config.read_text()),
        "workdir": str(base),
    }
    try:
        failed = run_parts(payload, base, setup, (import_config, config), args, env)
    finally:
        shutil.rmtree(prefect_home, ignore_errors=True)
    if "minimum_bytes_per_epoch" in payload:
        print_report(payload)
    path = write_json("cluster_scaling_quick" if args.quick else "cluster_scaling", payload)
    print(f"wrote {path}")
    return 1 if failed else 0


# ---- set-up, files and measured commands ---------------------------------------------------------
WORK = WORK_DIR / "distributed"
ENTITY = "node"
PARTITIONS = 4
IMPORT_MARKER = "import.done"
EVAL_KEYS = ("mrr", "r1", "r10", "r50", "pos_rank", "auc", "count")


@dataclass(frozen=True)
class Setup:
    """Graph and model of a run of this script (all of it goes into the JSON)."""

    nodes: int
    edges: int  # train + test, distinct
    test_fraction: float
    community_size: int
    mix: float
    alpha: float
    graph_seed: int
    dimension: int
    epochs: int
    lr: float
    batch_size: int
    num_batch_negs: int
    num_uniform_negs: int
    operator: str


def graph_params(setup: Setup) -> chung_lu.GraphParams:
    return chung_lu.GraphParams(
        nodes=setup.nodes,
        edges=setup.edges,
        seed=setup.graph_seed,
        alpha=setup.alpha,
        test_fraction=setup.test_fraction,
        communities=max(2, setup.nodes // setup.community_size),
        mix=setup.mix,
    )


# ---- files ------------------------------------------------------------------------------------
def config_dict(base: Path, setup: Setup, edge_paths: list[str]) -> dict[str, Any]:
    """The config every command reads (absolute paths: the Dask workers need no shared cwd)."""
    return {
        "entity_path": str(base / "data" / "entities"),
        "edge_paths": edge_paths,
        "checkpoint_path": str(base / "runs" / "unused"),
        "entities": {ENTITY: {"num_partitions": PARTITIONS}},
        "relations": [{"name": "link", "lhs": ENTITY, "rhs": ENTITY, "operator": setup.operator}],
        "dimension": setup.dimension,
        "global_emb": False,
        "comparator": "dot",
        "loss_fn": "softmax",
        "lr": setup.lr,
        "num_epochs": setup.epochs,
        "batch_size": setup.batch_size,
        "num_batch_negs": setup.num_batch_negs,
        "num_uniform_negs": setup.num_uniform_negs,
        "eval_fraction": 0.0,
        "hogwild_delay": 0.0,
        "bucket_order": "inside_out",
        "num_machines": 1,
    }


def edge_path(base: Path, split: str) -> str:
    return str(base / "data" / "edges" / split)


def write_configs(base: Path, setup: Setup) -> tuple[Path, Path]:
    """(import config with both splits, training config with the train split)."""
    splits = [edge_path(base, "train"), edge_path(base, "test")]
    import_config, config = base / "import_config.json", base / "config.json"
    write_if_changed(import_config, json.dumps(config_dict(base, setup, splits), indent=2) + "\n")
    write_if_changed(config, json.dumps(config_dict(base, setup, splits[:1]), indent=2) + "\n")
    return import_config, config


# ---- measured commands ------------------------------------------------------------------------
QUIET = {"max_wait_s": 0.0}  # --quiet-wait: set by main()


def run(argv: list[str], cwd: Path, name: str, env: dict[str, str], lock: Path | None) -> RunResult:
    """A measured command under the lock, after a wait for a quiet machine (``--quiet-wait``), echoed
    first; ``result.cpu`` tells whose CPU it shared (bench.lib.quiet.run_together)."""
    return run_together([Job(argv, cwd, name, env)], lock, QUIET["max_wait_s"])[0]


def import_graph(base: Path, graph: dict[str, Any], import_config: Path, env: dict[str, str], lock: Path | None):
    """``pbg import`` of both splits once; later invocations read the marker's figures."""
    marker = base / IMPORT_MARKER
    if marker.exists():
        return {**json.loads(marker.read_text()), "cached": True}
    shutil.rmtree(base / "data", ignore_errors=True)
    argv = [str(ours_bin()), "import", str(import_config), graph["train"], graph["test"], "-l", "0", "-r", "1"]
    result = run(argv, base, "import", env, lock)
    record = {"wall_s": result.wall_s, "peak_rss_bytes": result.peak_rss_bytes, "command": result.summary()}
    if result.ok:
        marker.write_text(json.dumps(record))
    return {**record, "cached": False, "ok": result.ok}


def entity_counts(base: Path) -> list[int]:
    """Rows of each partition, from the import's entity count files."""
    counts = []
    for part in range(PARTITIONS):
        path = base / "data" / "entities" / f"entity_count_{ENTITY}_{part}.txt"
        counts.append(int(path.read_text().split()[0]))
    return counts


# ---- commands ---------------------------------------------------------------------------------
def train_argv(
    config: Path, checkpoint: Path, machines: int, seed: int, workers: int | None, extra: tuple[str, ...] = ()
) -> list[str]:
    """``pbg train`` of ``config`` with these overrides, then the ``extra`` ones (``field=value``)."""
    overrides = [f"checkpoint_path={checkpoint}", f"num_machines={machines}", f"seed={seed}"]
    if workers is not None:
        overrides.append(f"workers={workers}")
    overrides.extend(extra)
    return [str(ours_bin()), "train", str(config), *[a for o in overrides for a in ("-p", o)]]


def eval_argv(config: Path, base: Path, checkpoint: Path) -> list[str]:
    """Filtered all-negatives ranking of the test split (train and test edges filtered)."""
    overrides = [
        f"edge_paths={edge_path(base, 'test')}",
        "relations.0.all_negs=true",
        "num_uniform_negs=0",
        f"checkpoint_path={checkpoint}",
    ]
    filters = [a for s in ("train", "test") for a in ("--filter-path", edge_path(base, s))]
    return [str(ours_bin()), "eval", str(config), *[a for o in overrides for a in ("-p", o)], "--filtered", *filters]


def parse_eval_json(stdout: str) -> dict[str, float]:
    """The metrics object on the last non-empty stdout line of ``pbg eval --json``."""
    metrics = eval_metrics(stdout)
    return {k: float(metrics[k]) for k in EVAL_KEYS if k in metrics}


def fresh_checkpoint(base: Path, name: str) -> Path:
    """runs/<name>/checkpoints, emptied: every training starts from scratch."""
    checkpoint = base / "runs" / name / "checkpoints"
    shutil.rmtree(checkpoint, ignore_errors=True)
    return checkpoint


def train_run(
    base: Path,
    config: Path,
    name: str,
    machines: int,
    seed: int,
    workers: int | None,
    minimum: int,
    env: dict[str, str],
    lock: Path | None,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One ``pbg train`` from scratch into runs/<name>/checkpoints (``extra``: more overrides), and its rows' summary."""
    checkpoint = fresh_checkpoint(base, name)
    argv = train_argv(config, checkpoint, machines, seed, workers, extra)
    result = run(argv, checkpoint.parent, "train", env, lock)
    return train_record(result, name, checkpoint, machines, seed, workers, minimum)


def train_record(
    result: Any, name: str, checkpoint: Path, machines: int, seed: int, workers: int | None, minimum: int
) -> dict[str, Any]:
    """The record of a measured ``pbg train`` into ``checkpoint``: its command, and if it ended well the
    summary of its stats rows, its partition files, its log's phases and notes."""
    record: dict[str, Any] = {
        "name": name,
        "num_machines": machines,
        "workers": workers,
        "seed": seed,
        "ok": result.ok,
        "wall_s": result.wall_s,
        "peak_rss_mib": mib(result.peak_rss_bytes),
        "peak_pss_mib": mib(result.peak_pss_bytes),
        "cpu": result.cpu,
        "command": result.summary(),
    }
    if result.ok:
        rows = stats.bucket_rows(checkpoint)
        record["rows"] = summarize_rows(rows, result.wall_s, machines, minimum)
        record["partition_files"] = partition_file_bytes(checkpoint, ENTITY)
        record["phases"] = log_phases(result.stdout + result.stderr, result.started_at, result.wall_s, rows)
        record["log_notes"] = log_notes(result.stdout + result.stderr)
    return record


def log_notes(text: str) -> list[str]:
    """Warning and error lines of a run's output (at most 20): anomalies to look at."""
    marks = ("WARNING", "ERROR", "Traceback", "Exception", "error:")
    return [line[:300] for line in text.splitlines() if any(m in line for m in marks)][:20]


def evaluate(base: Path, config: Path, rundir: Path, env: dict[str, str], lock: Path | None) -> dict[str, Any]:
    argv = [*eval_argv(config, base, rundir / "checkpoints"), "--json"]
    result = run(argv, rundir, "eval", env, lock)
    record: dict[str, Any] = {"ok": result.ok, "wall_s": result.wall_s, "command": result.summary()}
    if result.ok:
        try:
            record["metrics"] = parse_eval_json(result.stdout)
        except (ValueError, KeyError) as error:
            record.update(ok=False, error=str(error))
    return record


def warm_up(base: Path, config: Path, env: dict[str, str], lock: Path | None) -> dict[str, Any]:
    """Unmeasured, before the first measured run: one epoch on 2 machines (Prefect's database in the
    fresh PREFECT_HOME, Python's and the OS's file caches); without it the first run pays about 8 s more."""
    rundir = base / "runs" / "warm-up"
    shutil.rmtree(rundir / "checkpoints", ignore_errors=True)
    argv = [*train_argv(config, rundir / "checkpoints", 2, 0, 1), "-p", "num_epochs=1"]
    result = run(argv, rundir, "train", env, lock)
    shutil.rmtree(rundir / "checkpoints", ignore_errors=True)
    return {"ok": result.ok, "wall_s": result.wall_s}


# ---- what a finished run says: stats rows, log, files --------------------------------------------
def bucket_seconds(row: dict[str, Any]) -> float:
    """A bucket's time on its machine: the sum of its timing fields."""
    return sum(float(v) for v in (row.get("timing") or {}).values() if isinstance(v, int | float))


def per_machine_split(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Buckets, bucket seconds and edges of each machine (``machine`` of a row; ``local`` if absent)."""
    per_machine: dict[str, dict[str, float]] = {}
    for r in rows:
        entry = per_machine.setdefault(str(r.get("machine", "local")), {"buckets": 0, "bucket_s": 0.0, "edges": 0})
        entry["buckets"] += 1
        entry["bucket_s"] += bucket_seconds(r)
        entry["edges"] += int(r["stats"]["count"])
    return per_machine


def per_epoch_io(rows: list[dict[str, Any]], minimum: int) -> list[dict[str, float]]:
    """Per epoch (in order): buckets, bytes read and written, io seconds, and bytes against ``minimum``."""
    epochs: dict[int, dict[str, float]] = {}
    for r in rows:
        epoch = epochs.setdefault(int(r.get("epoch_idx", 0)), {"buckets": 0, "bytes_read": 0, "bytes_written": 0})
        io = r.get("io") or {}
        epoch["buckets"] += 1
        epoch["bytes_read"] += int(io.get("bytes_read", 0))
        epoch["bytes_written"] += int(io.get("bytes_written", 0))
        epoch["io_seconds"] = epoch.get("io_seconds", 0.0) + float(io.get("seconds", 0.0))
    for epoch in epochs.values():
        epoch["read_vs_minimum"] = ratio(epoch["bytes_read"], minimum)
        epoch["written_vs_minimum"] = ratio(epoch["bytes_written"], minimum)
    return [epochs[e] for e in sorted(epochs)]


def summarize_rows(rows: list[dict[str, Any]], wall_s: float, machines: int, minimum: int) -> dict[str, Any]:
    """Rates, per-bucket time split, bytes per epoch against ``minimum`` and the gap of one run.

    ``train_edges_per_s``: edges over the sum of ``timing.train`` (one trainer's rate inside its
    buckets); ``aggregate_train_edges_per_s``: edges over that sum divided by ``machines`` (all
    machines' in-bucket rate together); ``whole_run_edges_per_s``: edges over the wall time.
    """
    edges = stats.edges(rows)
    train_s = sum(float(r.get("timing", {}).get("train", 0.0)) for r in rows)
    keys = sorted({k for r in rows for k in (r.get("timing") or {})})
    timing_mean = {k: statistics.fmean(float(r.get("timing", {}).get(k, 0.0)) for r in rows) for k in keys}
    per_machine = per_machine_split(rows)
    buckets_s = sum(m["bucket_s"] for m in per_machine.values())
    per_epoch = per_epoch_io(rows, minimum)
    return {
        "buckets": len(rows),
        "edges": edges,
        "train_s": train_s,
        "train_edges_per_s": ratio(edges, train_s),
        "aggregate_train_edges_per_s": ratio(edges, train_s / machines),
        "whole_run_edges_per_s": ratio(edges, wall_s),
        "timing_mean_s": timing_mean,
        "bucket_mean_s": buckets_s / len(rows) if rows else None,
        "buckets_total_s": buckets_s,
        "per_machine": per_machine,
        "gap_s": wall_s - buckets_s / machines if rows else None,
        "per_epoch": per_epoch,
        "bytes_read_per_epoch": statistics.fmean(e["bytes_read"] for e in per_epoch) if per_epoch else None,
        "bytes_written_per_epoch": statistics.fmean(e["bytes_written"] for e in per_epoch) if per_epoch else None,
        "minimum_bytes_per_epoch": minimum,
    }


_ON_MACHINE = re.compile(r"train bucket \(\d+, \d+\) on (\S+?)'")


def log_marks(text: str, started_at: float) -> tuple[dict[str, float], dict[str, list[float]]]:
    """(first lease and cluster-start offsets, each machine's ``trained`` line offsets), in s from the spawn."""

    def offset(match: re.Match[str]) -> float:
        return clock_time(match["clock"], started_at) - started_at

    marks: dict[str, float] = {}
    trained: dict[str, list[float]] = {}
    for line in text.splitlines():
        match = LOG_LINE.match(line)
        if not match:
            continue
        message = match["rest"]
        if TRAINED.search(message):
            on = _ON_MACHINE.search(message)
            trained.setdefault(on.group(1) if on else "local", []).append(offset(match))
        elif "lease on" in message and "taken" in message:
            marks.setdefault("lease", offset(match))
        elif "started a local Dask cluster" in message:
            marks.setdefault("cluster", offset(match))
    return marks, trained


def machine_phases(trained: dict[str, list[float]], rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per machine: its buckets, first and last ``trained`` line and its dead time per bucket."""
    machines = {}
    for machine, times in trained.items():
        own = sorted((r for r in rows if str(r.get("machine", "local")) == machine), key=lambda r: r["index"])
        later = sum(bucket_seconds(r) for r in own[1:])
        dead = (times[-1] - times[0] - later) / (len(times) - 1) if len(times) > 1 else None
        machines[machine] = {
            "buckets": len(times),
            "first_trained_s": times[0],
            "last_trained_s": times[-1],
            "dead_per_bucket_s": dead,
        }
    return machines


def log_phases(text: str, started_at: float, wall_s: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a run's wall time went, from its log lines' clock (offsets from the spawn, in s).

    - ``startup``: spawn -> the checkpoint lease is taken (CLI, Prefect's server, config, plan);
    - ``to_first_bucket``: lease -> the first ``trained`` line (cluster start, machine build,
      the first bucket itself);
    - ``bucket_span``: first -> last ``trained`` line; ``tail``: last ``trained`` line -> exit
      (last save, checkpoint commit, cluster and server shutdown);
    - per machine: its buckets, first and last ``trained`` line, and its **dead time per bucket**:
      (last - first - the bucket times of its buckets after the first) / (buckets - 1), i.e. what
      a machine waits between two buckets beyond their own timing fields (hand-out, Dask round
      trip, recording). A distributed run's machine lines are relayed when the bucket's task
      ends (after the machine's save); one machine's are logged right after training.
    """
    marks, trained = log_marks(text, started_at)
    if not trained:
        return {}
    first = min(t[0] for t in trained.values())
    last = max(t[-1] for t in trained.values())
    machines = machine_phases(trained, rows)
    lease = marks.get("lease")
    deads = [m["dead_per_bucket_s"] for m in machines.values() if m["dead_per_bucket_s"] is not None]
    return {
        "startup_s": lease,
        "cluster_started_s": marks.get("cluster"),
        "to_first_bucket_s": first - lease if lease is not None else None,
        "bucket_span_s": last - first,
        "tail_s": wall_s - last,
        "dead_per_bucket_s": statistics.fmean(deads) if deads else None,
        "machines": machines,
    }


def partition_file_bytes(checkpoint: Path, entity: str) -> dict[str, int]:
    """Sizes of the committed version's partition files of ``entity`` (embeddings and optimizer state)."""
    try:
        version = int((checkpoint / "checkpoint_version.txt").read_text().strip())
    except (OSError, ValueError):
        return {}
    files = sorted(checkpoint.glob(f"embeddings_{entity}_*.v{version}.h5"))
    return {f.name: f.stat().st_size for f in files}


# ---- the quality and scaling parts ---------------------------------------------------------------
MRR_BAR = 0.01
SPEEDUP_BAR = 1.7
BAR_FIGURE = "aggregate_train_rate_ratio"
CEILING_SIDES = ("a", "b")


# ---- quality ----------------------------------------------------------------------------------
def signature(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Setting(NamedTuple):
    """A trained side of the quality part: its run-name part, machines, extra ``pbg train`` overrides."""

    name: str
    machines: int
    extra: tuple[str, ...]
    label: str


# The bar compares m2 (PBG's parameter-server merge) with m1; m2-average is measured beside it.
SETTINGS = (
    Setting("m1", 1, (), "1 machine (all cores)"),
    Setting("m2", 2, (), "2 Dask workers, shared merge delta"),
    Setting("m2-average", 2, ("distributed_shared_merge=average",), "2 Dask workers, shared merge average"),
)


def cached_quality(base: Path, config: Path, setting: Setting, seed: int, args) -> tuple[str, dict[str, Any] | None]:
    """(signature of the seed's commands, its finished record if one with that signature exists)."""
    rundir = base / "runs" / f"quality-{setting.name}-s{seed}"
    argv = train_argv(config, rundir / "checkpoints", setting.machines, seed, None, setting.extra)
    key = signature(config.read_text(), argv)
    path = rundir / "record.json"
    if path.exists() and not args.rerun:
        record = json.loads(path.read_text())
        if record.get("signature") == key and record.get("ok") and record.get("eval", {}).get("ok"):
            return key, record
    return key, None


def quality_seed(base: Path, config: Path, setting: Setting, seed: int, minimum: int, args, env) -> dict[str, Any]:
    """Train and evaluate one (setting, seed), or reuse its record if the same commands finished."""
    name = f"quality-{setting.name}-s{seed}"
    rundir = base / "runs" / name
    key, cached = cached_quality(base, config, setting, seed, args)
    if cached is not None:
        print(f"{name}: recorded (MRR {cached['eval']['metrics']['mrr']:.4f}), reused", flush=True)
        return {**cached, "cached": True}
    (rundir / "record.json").unlink(missing_ok=True)
    record = train_run(base, config, name, setting.machines, seed, None, minimum, env, args.lock, setting.extra)
    record["signature"] = key
    if record["ok"]:
        record["eval"] = evaluate(base, config, rundir, env, args.lock)
        if record["eval"]["ok"]:
            (rundir / "record.json").write_text(json.dumps(record, indent=2, default=str))
            print(f"  MRR {record['eval']['metrics']['mrr']:.4f}", flush=True)
    return {**record, "cached": False}


def run_quality(base: Path, config: Path, minimum: int, args, env) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in SETTINGS}
    for seed in args.seeds:
        for setting in SETTINGS:  # side by side per seed
            runs[setting.name].append(quality_seed(base, config, setting, seed, minimum, args, env))
    summary: dict[str, Any] = {"runs": runs, "labels": {s.name: s.label for s in SETTINGS}}
    means = {}
    for machines, records in runs.items():
        metrics = [r["eval"]["metrics"] for r in records if r.get("eval", {}).get("ok")]
        if len(metrics) == len(args.seeds):
            means[machines] = {
                k: statistics.fmean(m[k] for m in metrics) for k in ("mrr", "r1", "r10", "pos_rank", "auc")
            }
            means[machines]["mrr_std"] = statistics.stdev(m["mrr"] for m in metrics) if len(metrics) > 1 else 0.0
    summary["mean"] = means
    if "m1" in means and "m2" in means:
        diff = means["m2"]["mrr"] - means["m1"]["mrr"]
        summary.update(mrr_difference=diff, passed=abs(diff) <= MRR_BAR)
    if "m2" in means and "m2-average" in means:
        summary["average_minus_delta_mrr"] = means["m2-average"]["mrr"] - means["m2"]["mrr"]
    return summary


# ---- ceiling ----------------------------------------------------------------------------------
def primed_prefect_home() -> Path | None:
    """A new PREFECT_HOME whose database Prefect's migrations have brought to head (unmeasured), or
    None if they failed. Copied for each ceiling run: a new home's migrations (seconds to tens of
    seconds, each server on its own) would otherwise land in the runs' wall times."""
    home = Path(tempfile.mkdtemp(prefix="pbg-distributed-prefect-template-"))
    argv = [str(ours_bin("prefect")), "server", "database", "upgrade", "-y"]
    print(f"$ PREFECT_HOME={home} {' '.join(argv)}  (unmeasured: the ceiling runs' PREFECT_HOMEs)", flush=True)
    env = {**os.environ, "PREFECT_HOME": str(home), "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        print(f"  FAILED (exit {result.returncode}); ceiling runs migrate their own databases", flush=True)
        print(tail(result.stdout + result.stderr, 20), flush=True)
        shutil.rmtree(home, ignore_errors=True)
        return None
    return home


def ceiling_pair(base: Path, config: Path, repeat: int, minimum: int, template: Path | None, lock) -> list[dict]:
    """Two ``pbg train`` runs (1 machine, ``workers`` 1, seed 0, the scaling config) started together,
    each into its own runs/scaling-ceiling-r<round>-<a|b>/ and on its own new PREFECT_HOME (a copy
    of ``template`` when given): two commands on one new PREFECT_HOME race through its migrations."""
    homes: list[Path] = []
    try:
        jobs, checkpoints = [], []
        for side in CEILING_SIDES:
            home = Path(tempfile.mkdtemp(prefix="pbg-distributed-prefect-ceiling-"))
            homes.append(home)
            if template is not None:
                shutil.copytree(template, home, dirs_exist_ok=True)
            checkpoint = fresh_checkpoint(base, f"scaling-ceiling-r{repeat}-{side}")
            checkpoints.append(checkpoint)
            argv = train_argv(config, checkpoint, 1, 0, 1)
            jobs.append(Job(argv, checkpoint.parent, "train", {"PREFECT_HOME": str(home)}))
        results = run_together(jobs, lock)
    finally:
        for home in homes:
            shutil.rmtree(home, ignore_errors=True)
    return [
        train_record(result, checkpoint.parent.name, checkpoint, 1, 0, 1, minimum)
        for result, checkpoint in zip(results, checkpoints, strict=True)
    ]


def measured(record: dict[str, Any] | None) -> bool:
    """A training that ended well and has bucket rows."""
    return bool(record and record["ok"] and record.get("rows", {}).get("buckets"))


def ceiling_figures(single: dict[str, Any], pair: list[dict[str, Any]]) -> dict[str, Any]:
    """One round's ceiling: the pair's rates and walls, and both ratios against the round's 1-machine run."""
    figures: dict[str, Any] = {"runs": pair}
    if not (measured(single) and all(measured(r) for r in pair)):
        return figures
    rates = [r["rows"]["train_edges_per_s"] for r in pair]
    walls = [r["wall_s"] for r in pair]
    starts = [r["command"]["started_at"] for r in pair]
    edges = sum(r["rows"]["edges"] for r in pair)
    throughput = ratio(edges, max(walls))
    figures.update(
        train_edges_per_s=rates,
        wall_s=walls,
        start_offset_s=max(starts) - min(starts),
        mean_train_edges_per_s=statistics.fmean(rates),
        slower_wall_s=max(walls),
        throughput_edges_per_s=throughput,
        per_trainer_ratio=ratio(statistics.fmean(rates), single["rows"]["train_edges_per_s"]),
        throughput_ratio=ratio(throughput, single["rows"]["whole_run_edges_per_s"]),
    )
    return figures


# ---- scaling ----------------------------------------------------------------------------------
def run_scaling(base: Path, config: Path, minimum: int, args, env) -> dict[str, Any]:
    rounds: list[dict[int, dict[str, Any]]] = []
    ceilings: list[dict[str, Any]] = []
    template = None if args.skip_ceiling else primed_prefect_home()
    try:
        for repeat in range(args.repeats):
            pair = {}
            for machines in (1, 2):
                name = f"scaling-m{machines}-r{repeat}"
                pair[machines] = train_run(base, config, name, machines, 0, 1, minimum, env, args.lock)
            rounds.append(pair)
            if not args.skip_ceiling:
                runs = ceiling_pair(base, config, repeat, minimum, template, args.lock)
                ceilings.append(ceiling_figures(pair[1], runs))
    finally:
        if template is not None:
            shutil.rmtree(template, ignore_errors=True)
    summary: dict[str, Any] = {"rounds": rounds}
    if not args.skip_ceiling:
        summary["ceiling"] = {"prefect_home_primed": template is not None, "rounds": ceilings}
    return scaling_summary(summary, rounds, ceilings if not args.skip_ceiling else None)


def round_figures(pair: dict[int, dict[str, Any]], ceiling: dict[str, Any] | None) -> dict[str, float | None]:
    """One round's 2-machine / 1-machine ratios, and its ceiling ratios."""
    one, two = ((pair[m].get("rows") or {}) for m in (1, 2))
    return {
        "whole_run_speedup": ratio(two.get("whole_run_edges_per_s"), one.get("whole_run_edges_per_s")),
        "per_bucket_rate_ratio": ratio(two.get("train_edges_per_s"), one.get("train_edges_per_s")),
        "aggregate_train_rate_ratio": ratio(
            two.get("aggregate_train_edges_per_s"), one.get("aggregate_train_edges_per_s")
        ),
        "ceiling_per_trainer_ratio": (ceiling or {}).get("per_trainer_ratio"),
        "ceiling_throughput_ratio": (ceiling or {}).get("throughput_ratio"),
    }


def scaling_medians(rounds: list[dict[int, dict[str, Any]]]) -> dict[int, dict[str, float]]:
    """Per number of machines, the medians over the rounds (only if every round's run was measured)."""
    medians: dict[int, dict[str, float]] = {}
    for machines in (1, 2):
        ok = [p[machines] for p in rounds if measured(p[machines])]
        if len(ok) != len(rounds):
            continue
        medians[machines] = {
            "wall_s": statistics.median(r["wall_s"] for r in ok),
            "train_edges_per_s": statistics.median(r["rows"]["train_edges_per_s"] for r in ok),
            "aggregate_train_edges_per_s": statistics.median(r["rows"]["aggregate_train_edges_per_s"] for r in ok),
            "whole_run_edges_per_s": statistics.median(r["rows"]["whole_run_edges_per_s"] for r in ok),
            "gap_s": statistics.median(r["rows"]["gap_s"] for r in ok),
        }
    return medians


def scaling_summary(
    summary: dict[str, Any], rounds: list[dict[int, dict[str, Any]]], ceilings: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """Per-round figures, medians, the three 2/1 ratios (of the medians), the two ceiling ratios
    (medians of the rounds' ratios) and the verdict: ``aggregate_train_rate_ratio`` >= the bar."""
    per_round = [round_figures(p, ceilings[i] if ceilings else None) for i, p in enumerate(rounds)]
    summary["per_round"] = per_round
    medians = summary["median"] = scaling_medians(rounds)
    if ceilings is not None:
        for key in ("ceiling_per_trainer_ratio", "ceiling_throughput_ratio"):
            values = [f[key] for f in per_round if f[key] is not None]
            summary[key] = statistics.median(values) if values and len(values) == len(per_round) else None
    if len(medians) == 2:
        aggregate = ratio(medians[2]["aggregate_train_edges_per_s"], medians[1]["aggregate_train_edges_per_s"])
        summary.update(
            whole_run_speedup=ratio(medians[2]["whole_run_edges_per_s"], medians[1]["whole_run_edges_per_s"]),
            per_bucket_rate_ratio=ratio(medians[2]["train_edges_per_s"], medians[1]["train_edges_per_s"]),
            aggregate_train_rate_ratio=aggregate,
            bar={"figure": BAR_FIGURE, "at_least": SPEEDUP_BAR},
            passed=aggregate is not None and aggregate >= SPEEDUP_BAR,
        )
    return summary


# ---- the tables ----------------------------------------------------------------------------------
ROUND_FIGURES = (
    "whole_run_speedup",
    "per_bucket_rate_ratio",
    "aggregate_train_rate_ratio",
    "ceiling_per_trainer_ratio",
    "ceiling_throughput_ratio",
)


def scaling_runs(scaling: dict[str, Any]) -> list[dict[str, Any]]:
    """The scaling part's runs, round by round: 1 machine, 2 machines, then the ceiling pair."""
    runs = []
    ceilings = (scaling.get("ceiling") or {}).get("rounds", [])
    for i, pair in enumerate(scaling.get("rounds", [])):
        runs.extend(pair.values())
        if i < len(ceilings):
            runs.extend(ceilings[i]["runs"])
    return runs


def all_runs(payload: dict[str, Any]) -> list[dict[str, Any]]:
    runs = []
    quality = payload.get("quality") or {}
    for records in (quality.get("runs") or {}).values():
        runs.extend(records)
    runs.extend(scaling_runs(payload.get("scaling") or {}))
    return runs


def run_kind(name: str) -> str:
    """``quality-m1-s0`` -> ``quality-m1``, ``scaling-m2-r0`` -> ``scaling-m2``,
    ``scaling-ceiling-r0-a`` -> ``scaling-ceiling``."""
    return re.sub(r"-[rs]\d+(-[a-z])?$", "", name)


def fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_report(payload: dict[str, Any]) -> None:
    setup, graph = payload["setup"], payload["graph"]["summary"]
    print()
    print(
        f"graph: {setup['nodes']:,} nodes ({graph['distinct_nodes']:,} with edges), {graph['train_edges']:,} train "
        f"/ {graph['test_edges']:,} test edges, {graph['within_community_edges'] / setup['edges']:.0%} inside "
        f"communities of {setup['community_size']}; {PARTITIONS} partitions; d={setup['dimension']}, "
        f"{setup['epochs']} epochs, dot, softmax, lr {setup['lr']}, {setup['num_batch_negs']}+"
        f"{setup['num_uniform_negs']} negatives; minimum bytes per epoch "
        f"{mib(payload['minimum_bytes_per_epoch']):.1f} MiB"
    )
    if payload.get("quality"):
        print_quality(payload["quality"])
    if payload.get("scaling"):
        print_scaling(payload["scaling"])
    runs = [r for r in all_runs(payload) if r.get("rows")]
    if runs:
        print_bytes_vs_minimum(runs, payload["minimum_bytes_per_epoch"])
        print_time_tables(runs)


def print_quality(quality: dict[str, Any]) -> None:
    print("\nQuality parity (filtered MRR, all_negs within the partition, test split):")
    rows = []
    for setting, records in quality["runs"].items():
        mean = quality["mean"].get(setting)
        per_seed = " ".join(fmt(r.get("eval", {}).get("metrics", {}).get("mrr")) for r in records)
        walls = [r["wall_s"] for r in records if r.get("ok")]
        label = quality.get("labels", {}).get(setting, setting)
        rows.append(
            [
                label,
                per_seed,
                fmt(mean and mean["mrr"]),
                fmt(mean and mean["mrr_std"]),
                fmt(mean and mean["r10"]),
                f"{statistics.fmean(walls):.1f}" if walls else "-",
            ]
        )
    print(format_table(["setting", "MRR per seed", "mean MRR", "std", "mean Hits@10", "train wall s"], rows))
    if "mrr_difference" in quality:
        verdict = "PASS" if quality["passed"] else "FAIL"
        print(f"2 machines - 1 machine: {quality['mrr_difference']:+.4f} (bar |diff| <= {MRR_BAR}): {verdict}")
    if "average_minus_delta_mrr" in quality:
        print(f"2 machines, shared merge average - delta: {quality['average_minus_delta_mrr']:+.4f} MRR")


def print_scaling(scaling: dict[str, Any]) -> None:
    print("\nScaling (workers=1 per machine, local disk; ceiling: two 1-machine runs at once, own PREFECT_HOMEs):")
    rows = []
    for r in scaling_runs(scaling):
        s = r.get("rows") or {}
        rows.append(
            [
                r["name"],
                fmt(r["wall_s"], 1),
                s.get("edges"),
                s.get("train_edges_per_s"),
                s.get("aggregate_train_edges_per_s"),
                s.get("whole_run_edges_per_s"),
                fmt(mib(s.get("bytes_read_per_epoch")), 1),
                fmt(ratio(s.get("bytes_read_per_epoch"), s.get("minimum_bytes_per_epoch")), 2),
                fmt(mib(s.get("bytes_written_per_epoch")), 1),
                fmt(ratio(s.get("bytes_written_per_epoch"), s.get("minimum_bytes_per_epoch")), 2),
                fmt(s.get("gap_s"), 1),
                fmt((r.get("cpu") or {}).get("others_s"), 1),
            ]
        )
    headers = ["run", "wall s", "edges", "train e/s", "aggregate e/s", "whole-run e/s", "read MiB/ep", "x min"]
    print(format_table([*headers, "written MiB/ep", "x min", "gap s", "others' CPU s"], rows))
    print_scaling_figures(scaling)


def print_scaling_figures(scaling: dict[str, Any]) -> None:
    """The figures per round, their medians, which one the bar is on, and the verdict."""
    rows = [[i, *(fmt(f.get(k), 3) for k in ROUND_FIGURES)] for i, f in enumerate(scaling.get("per_round", []))]
    rows.append(["median", *(fmt(scaling.get(k), 3) for k in ROUND_FIGURES)])
    print("\nScaling figures (2 machines / 1 machine, and the ceiling pair / 1 machine alone), per round:")
    print(format_table(["round", *ROUND_FIGURES], rows))
    print(
        "  whole_run_speedup: whole-command edges/s; per_bucket_rate_ratio: one trainer's in-bucket edges/s "
        "(edges / sum of timing.train); aggregate_train_rate_ratio: all machines' in-bucket edges/s together "
        "(edges / (sum of timing.train / num_machines)); ceiling_per_trainer_ratio: the pair's mean train "
        "edges/s / the 1-machine run's; ceiling_throughput_ratio: (both runs' edges / the slower one's wall) / "
        "(edges / wall of the 1-machine run). The first three medians are ratios of the medians over rounds, "
        "the ceiling medians are medians of the rounds' ratios."
    )
    if (scaling.get("ceiling") or {}).get("prefect_home_primed") is False:
        print("  note: the ceiling runs' PREFECT_HOMEs were not migrated beforehand: their walls include it")
    if BAR_FIGURE in scaling:
        verdict = "PASS" if scaling["passed"] else "FAIL"
        aggregate = scaling[BAR_FIGURE]
        print(
            f"The bar is on {BAR_FIGURE} (both machines' in-bucket train rate together vs one machine's), "
            f"medians over rounds: {fmt(aggregate, 2)}x (bar >= {SPEEDUP_BAR}x): {verdict}; "
            f"whole-run edges/s {fmt(scaling['whole_run_speedup'], 2)}x, per-bucket train edges/s "
            f"{fmt(scaling['per_bucket_rate_ratio'], 2)}x; ceiling per trainer "
            f"{fmt(scaling.get('ceiling_per_trainer_ratio'), 2)}x, ceiling throughput "
            f"{fmt(scaling.get('ceiling_throughput_ratio'), 2)}x"
        )


def print_bytes_vs_minimum(runs: list[dict[str, Any]], minimum: int) -> None:
    """Per kind of run, the median bytes read and written per epoch, in MiB and as multiples of ``minimum``."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        kinds.setdefault(run_kind(r["name"]), []).append(r["rows"])
    rows = []
    for kind, summaries in kinds.items():
        read = [s["bytes_read_per_epoch"] for s in summaries if s.get("bytes_read_per_epoch") is not None]
        written = [s["bytes_written_per_epoch"] for s in summaries if s.get("bytes_written_per_epoch") is not None]
        read_mid = statistics.median(read) if read else None
        written_mid = statistics.median(written) if written else None
        rows.append(
            [
                kind,
                len(summaries),
                fmt(mib(read_mid), 1),
                fmt(ratio(read_mid, minimum), 2),
                fmt(mib(written_mid), 1),
                fmt(ratio(written_mid, minimum), 2),
            ]
        )
    print(f"\nBytes per epoch vs the minimum ({fmt(mib(minimum), 1)} MiB: every partition read once, written once):")
    print(format_table(["kind", "runs", "read MiB/ep", "read x min", "written MiB/ep", "written x min"], rows))
    print("  median over the kind's runs; x min = bytes per epoch / the minimum")


def print_time_tables(runs: list[dict[str, Any]]) -> None:
    """Per-bucket timing means, then each run's wall time split and gap."""
    print("\nPer bucket (mean s of each timing field over the bucket rows; bucket = their sum):")
    keys = sorted({k for r in runs for k in r["rows"]["timing_mean_s"]})
    rows = []
    for r in runs:
        s = r["rows"]
        machines = ", ".join(f"{v['buckets']}:{v['bucket_s']:.1f}s" for v in s["per_machine"].values())
        io_s = statistics.fmean(e["io_seconds"] for e in s["per_epoch"]) / (s["buckets"] / len(s["per_epoch"]))
        workers = r["workers"] or f"{max(1, len(os.sched_getaffinity(0)) // r['num_machines'])} (auto)"
        rows.append(
            [
                r["name"],
                f"{r['num_machines']}x{workers}",
                *(fmt(s["timing_mean_s"].get(k), 3) for k in keys),
                fmt(s["bucket_mean_s"], 3),
                fmt(io_s, 3),
                machines,
            ]
        )
    print(format_table(["run", "machines x workers", *keys, "bucket", "io.seconds", "buckets:s per machine"], rows))
    print_wall_split(runs)


def print_wall_split(runs: list[dict[str, Any]]) -> None:
    """Each run's wall time cut at its log lines, its bucket time per machine and its gap."""
    print("\nWall time (s): spawn -> lease (startup) -> first bucket line -> last bucket line -> exit (tail):")
    rows = []
    for r in runs:
        s, p = r["rows"], r.get("phases") or {}
        rows.append(
            [
                r["name"],
                fmt(r["wall_s"], 1),
                fmt(p.get("startup_s"), 1),
                fmt(p.get("to_first_bucket_s"), 1),
                fmt(p.get("bucket_span_s"), 1),
                fmt(p.get("tail_s"), 1),
                fmt(s["buckets_total_s"] / r["num_machines"], 1),
                fmt(s["gap_s"], 1),
                fmt(p.get("dead_per_bucket_s"), 3),
                fmt((r.get("cpu") or {}).get("others_s"), 1),
            ]
        )
    headers = ["run", "wall", "startup", "to 1st bucket", "bucket span", "tail", "sum(bucket)/M", "gap"]
    print(format_table([*headers, "dead s/bucket", "others' CPU s"], rows))
    print(
        "gap = wall - sum of bucket times / num_machines; dead s/bucket = a machine's time between two "
        "bucket lines beyond the later bucket's timing fields (mean over machines); others' CPU s = CPU "
        "seconds the machine spent on processes not ours during the run (other users' tests, type checkers; "
        "for the ceiling pair: during both)"
    )


if __name__ == "__main__":
    sys.exit(main())
