"""The commands bench/cluster_scaling.py runs, and how: set-up, files, measured runs, one training's record.

- the run's :class:`Setup` and its graph's parameters; the import and training configs;
- :func:`run` and :func:`run_together`: measured commands under the lock, after a wait for a quiet
  machine, with the CPU other people's processes took meanwhile;
- ``pbg import`` once (:func:`import_graph`), ``pbg train`` from scratch into runs/<name>/ with
  the summary of its stats rows, log and files (:func:`train_run`, :func:`train_record`), and
  ``pbg eval --filtered`` (:func:`evaluate`); the unmeasured :func:`warm_up`.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import lj_graph
from _common import WORK_DIR, measurement_lock, mib, ours_bin, run_measured, tail
from cluster_scaling_rows import bucket_rows, log_phases, partition_file_bytes, summarize_rows

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


def graph_params(setup: Setup) -> lj_graph.GraphParams:
    return lj_graph.GraphParams(
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


def write_if_changed(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_configs(base: Path, setup: Setup) -> tuple[Path, Path]:
    """(import config with both splits, training config with the train split)."""
    splits = [edge_path(base, "train"), edge_path(base, "test")]
    import_config, config = base / "import_config.json", base / "config.json"
    write_if_changed(import_config, json.dumps(config_dict(base, setup, splits), indent=2) + "\n")
    write_if_changed(config, json.dumps(config_dict(base, setup, splits[:1]), indent=2) + "\n")
    return import_config, config


# ---- measured commands ------------------------------------------------------------------------
QUIET = {"max_wait_s": 0.0}  # --quiet-wait: set by main()
QUIET_WINDOW_S = 3.0
QUIET_WINDOWS = 2
QUIET_CORES = 0.2  # "quiet": the whole machine busier than this many cores over a window is not


class Job(NamedTuple):
    """One command to measure: argv, working directory (logs go there), log base name, extra env."""

    argv: list[str]
    cwd: Path
    name: str
    env: dict[str, str]


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this script and of every descendant it (or they) reaped."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )


def wait_quiet(max_wait_s: float) -> float:
    """Wait (at most ``max_wait_s``) until the machine is idle over two windows in a row; seconds waited.

    Other people's processes (tests, type checkers) on a shared 2-core machine change a
    distributed run's figures far more than a single-trainer run's; this keeps them out of the
    start of a measurement, and the run's record says how much foreign CPU it still saw.
    """
    started, quiet = time.monotonic(), 0
    while quiet < QUIET_WINDOWS and time.monotonic() - started < max_wait_s:
        before = busy_cpu_seconds()
        time.sleep(QUIET_WINDOW_S)
        quiet = quiet + 1 if busy_cpu_seconds() - before < QUIET_CORES * QUIET_WINDOW_S else 0
    return time.monotonic() - started


def run(argv: list[str], cwd: Path, name: str, env: dict[str, str], lock: Path | None) -> Any:
    """A measured command under the lock, echoed first; ``result.cpu`` tells whose CPU it shared.

    ``cpu``: the machine's busy CPU seconds during the command, ours (the command's process tree,
    counted as its processes are reaped, and this script), the others' (the difference: anyone
    else's processes), the others' average in cores, the load averages before and after, and
    the seconds waited for a quiet machine first (``--quiet-wait``).
    """
    return run_together([Job(argv, cwd, name, env)], lock)[0]


def start_all(jobs: list[Job]) -> list[Any]:
    """run_measured of every job; several at once start together (one thread each, a barrier first)."""
    if len(jobs) == 1:
        job = jobs[0]
        return [run_measured(job.argv, job.cwd, job.name, env=job.env)]
    barrier = threading.Barrier(len(jobs))

    def measured(job: Job) -> Any:
        barrier.wait()
        return run_measured(job.argv, job.cwd, job.name, env=job.env)

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(measured, jobs))


def run_together(jobs: list[Job], lock: Path | None) -> list[Any]:
    """:func:`run` of several commands started at the same moment: one lock, one quiet wait before all.

    Each result's ``cpu`` is the same record, over the span from the first spawn to the last
    exit (``span_s``, ``together``: how many commands); the others' cores are over that span.
    """
    for job in jobs:
        print(f"$ {' '.join(job.argv)}", flush=True)
    with measurement_lock(lock):
        waited = wait_quiet(QUIET["max_wait_s"]) if QUIET["max_wait_s"] > 0 else 0.0
        load_before, busy, ours = os.getloadavg()[0], busy_cpu_seconds(), own_cpu_seconds()
        results = start_all(jobs)
        busy, ours = busy_cpu_seconds() - busy, own_cpu_seconds() - ours
    others = max(0.0, busy - ours)
    span = results[0].wall_s
    if len(results) > 1:
        span = max(r.started_at + r.wall_s for r in results) - min(r.started_at for r in results)
    cpu: dict[str, Any] = {
        "busy_s": busy,
        "ours_s": ours,
        "others_s": others,
        "others_cores": others / span if span else None,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg()[0],
        "quiet_wait_s": waited,
    }
    if len(results) > 1:
        cpu.update(together=len(results), span_s=span)
    for result in results:
        result.cpu = cpu
        status = "ok" if result.ok else f"FAILED (exit {result.returncode}), see {result.stderr_path}"
        print(f"  {result.wall_s:.1f} s, {status}; others' CPU {others:.1f} s, waited {waited:.0f} s", flush=True)
        if not result.ok:
            print(tail(result.stderr, 20), flush=True)
    return results


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
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("`pbg eval --json` printed nothing on stdout")
    metrics = json.loads(lines[-1])
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
        rows = bucket_rows(checkpoint)
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
