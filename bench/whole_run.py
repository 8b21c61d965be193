"""Whole `train` commands side by side, PyPI PBG 1.0.0 vs our `pbg`: where the wall time goes.

Three runs, each on one set of files imported once with our ``pbg import`` (PBG 1.0.0 reads
them: tests/compat checks it) and trained from scratch with one config file by both tools, a
fresh checkpoint directory per command:
- ``umls``: data/kg/umls/train.txt, examples/umls/config.py minus ``regularization_coef`` (PBG
  1.0.0 has no N3) and with ``hogwild_delay=0`` (PBG's 2 s epoch-0 sleep), 50 epochs;
- ``kg``: bench/configs/speed_c.py on bench.lib.graphs.kg's 257k-edge KG, 10 epochs;
- ``a``: bench/configs/speed_a.py on the 2M-edge power-law graph of bench.speed, 3 epochs.

Per run: one unmeasured warm-up command per side (1 epoch: our SQLite database in the script's
temporary PREFECT_HOME exists afterwards, numba and file caches are warm), then ``--repeats``
measured commands alternating PBG, ours, PBG, ours, ...; medians are reported. Each command is
timed from spawn to exit (bench.lib.runner.run_measured, with the peak RSS of its process tree)
and its log split into start-up, training, gaps between iterations, and the tail after the last
training (see "Where the time goes" below). Bars, on PBG wall / our wall:
umls >= 1.0x, kg >= 2.0x, a >= 2.0x.

Run: ``python -m bench.whole_run [--only umls|kg|a] [--repeats 3] [--quick] [--skip-pbg]
[--skip-ours] [--lock /tmp/pbg-bench.lock]``. Writes bench/results/whole_run.json (``--quick``:
whole_run_quick.json); a run of some cases replaces those cases' entries and keeps the others.
Exit status 1 if any command failed.

Where the time goes. A timeline is the list of per-bucket training intervals (wall-clock start and end, edges and
the tool's own compute seconds) plus the last checkpoint commit marker. From it and the
command's spawn time and wall time, ``phases`` splits the run into
``start-up + training + gaps + tail``: spawn -> first training start, the buckets' training,
the gaps between one bucket's training end and the next one's start (every bucket is one
iteration in the benchmark's 1-partition configs), and last training end -> exit (``tail``;
``shutdown`` is its part after the last commit marker).

Markers, by tool:
- PBG 1.0.0 logs ``YYYY-MM-DD HH:MM:SS,mmm  [Trainer-0] ( l , r ): bucket i / n : Processed N
  edges in T s ...`` right after its HOGWILD ``map_async`` returns, and takes ``T`` from a
  ``time.time()`` read right before it, so training starts at that line's time minus ``T``
  (the last INFO line before the first batch, ``( l , r ): Loading entities``, comes before
  the embeddings and edges are loaded; it is kept as ``first_bucket_marker``). Commit:
  ``Switching to the new checkpoint version``.
- ours (logger ``pbg_core.session.engine``, ``HH:MM:SS.mmm | LEVEL | name - message``): ``bucket (l, r):
  training N edges on W workers`` right before the first batch and ``bucket (l, r): trained N
  edges in T s`` right after the last. Without the first, the start is the end minus ``T``.
  Commit: ``committing version V`` (optional: None when the line is absent).

Log times have no time zone (both tools use local time, as ``time.localtime``) and ours have no
date: a clock time is placed on the day that puts it within 12 hours of the spawn.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.lib.configs import load_config_dict, write_config_module
from bench.lib.logs import (
    COMMITTING,
    LOG_LINE,
    PBG_BUCKET_START,
    PBG_COMMIT,
    PBG_LINE,
    PBG_PROCESSED,
    TRAINED,
    TRAINING,
    clock_time,
    pbg_time,
)
from bench.lib.quiet import measurement_lock
from bench.lib.report import format_table, mib, ratio, verdict, write_json
from bench.lib.runner import RunResult, run_measured, tail
from bench.lib.sides import (
    SideCommands,
    build_sides,
    ours_commands,
    ours_throughput,
    run_import,
    throughput_from_pbg,
)
from bench.lib.tools import REPO_ROOT, RESULTS_DIR, WORK_DIR, ToolMissingError, machine_info
from bench.speed import CASES as SPEED_CASES
from bench.speed import ensure_case_graph

UMLS_CONFIG = REPO_ROOT / "examples" / "umls" / "config.py"
UMLS_TRAIN = REPO_ROOT / "data" / "kg" / "umls" / "train.txt"
UNKNOWN_TO_PBG = ("regularization_coef",)  # keys PBG 1.0.0's config loader rejects
WORK = WORK_DIR / "whole_run"
SUMMARY_KEYS = (
    "wall_s",
    "startup_s",
    "training_s",
    "iterations",
    "gap_median_s",
    "gap_mean_s",
    "gaps_total_s",
    "tail_s",
    "shutdown_s",
    "other_s",
    "first_bucket_marker_s",
    "edges",
    "edges_per_s",
    "wall_edges_per_s",
    "peak_rss_mib",
    "peak_pss_mib",
)


@dataclass(frozen=True)
class WholeRunCase:
    """One whole-run benchmark: its default epochs and the bar on PBG wall / our wall."""

    name: str
    title: str
    epochs: int
    target: float


CASES = {
    "umls": WholeRunCase("umls", "UMLS demo", 50, 1.0),
    "kg": WholeRunCase("kg", "KG, config C", 10, 2.0),
    "a": WholeRunCase("a", "config A", 3, 2.0),
}


@dataclass(frozen=True)
class Prepared:
    """A case's config file, input TSV, working directory (imports, runs) and graph summary."""

    config: Path
    graph: Path
    workdir: Path
    graph_summary: dict[str, object]


def write_umls_config(path: Path) -> dict[str, object]:
    """Write the UMLS demo config as both tools load it; return what was changed and why."""
    config = load_config_dict(UMLS_CONFIG)
    dropped = {key: config.pop(key) for key in UNKNOWN_TO_PBG if key in config}
    paths = {"entity_path": "entities", "edge_paths": ["edges"], "checkpoint_path": "checkpoints"}
    # eval_fraction 0: the demo's own setting (run_demo.sh), so the figures compare with earlier ones.
    config.update(paths, hogwild_delay=0, eval_fraction=0)
    docstring = (
        f"Written by bench.whole_run from examples/umls/config.py: without {sorted(dropped)}"
        " (unknown to PBG 1.0.0), hogwild_delay 0, eval_fraction 0 (as the demo), paths in this directory."
    )
    write_config_module(path, docstring, config)
    return {"dropped": dropped, "set": {**paths, "hogwild_delay": 0, "eval_fraction": 0}}


def prepare(case: WholeRunCase, seed: int) -> Prepared:
    """The case's input graph (generated once) and config file."""
    if case.name == "umls":
        config = WORK / "configs" / "umls.py"
        derived = write_umls_config(config)
        lines = sum(1 for _ in UMLS_TRAIN.open())
        return Prepared(
            config,
            UMLS_TRAIN,
            WORK / "umls",
            {"path": str(UMLS_TRAIN), "edges": lines, "config_from": str(UMLS_CONFIG), **derived},
        )
    speed_case = SPEED_CASES["C" if case.name == "kg" else "A"]
    graph, summary = ensure_case_graph(speed_case, 1, seed)
    return Prepared(speed_case.config_file, graph, WORK / graph.stem, {"path": str(graph), **summary})


def train_argv(side: SideCommands, prepared: Prepared, epochs: int, checkpoint: str) -> list[str]:
    """The side's train command on the shared config with epochs and checkpoint as overrides."""
    overrides = [f"num_epochs={epochs}", f"checkpoint_path={checkpoint}", *side.train_overrides]
    return [*side.train_argv, str(prepared.config), *[a for o in overrides for a in ("-p", o)]]


def run_train(
    side: SideCommands, prepared: Prepared, epochs: int, label: str, env: dict[str, str], lock: Path | None
) -> dict[str, object]:
    """Train from scratch once (fresh checkpoint directory) and read where its time went."""
    checkpoint = f"runs/{side.name}-{label}"
    shutil.rmtree(prepared.workdir / checkpoint, ignore_errors=True)
    (prepared.workdir / "runs").mkdir(parents=True, exist_ok=True)
    argv = train_argv(side, prepared, epochs, checkpoint)
    with measurement_lock(lock):
        run = run_measured(argv, prepared.workdir, checkpoint, env=env if side.tool == "ours" else None)
    return analyse(side, run, prepared.workdir / checkpoint)


def analyse(side: SideCommands, run: RunResult, checkpoint: Path) -> dict[str, object]:
    """Status, wall time, memory, phases and train edges/s of one measured command."""
    record: dict[str, object] = {
        "status": "ok" if run.ok else "failed",
        "started_at": run.started_at,
        "wall_s": run.wall_s,
        "peak_rss_mib": mib(run.peak_rss_bytes),
        "peak_pss_mib": mib(run.peak_pss_bytes),
        "run": run.summary(),
    }
    if not run.ok:
        return record
    log = run.text()
    if side.tool == "pbg":
        timeline, throughput, own_total = parse_pbg(log), throughput_from_pbg(run), None
    else:
        timeline = parse_ours(log, run.started_at)
        throughput = ours_throughput(checkpoint, run.wall_s)
        if throughput is None:
            record.update(status="failed", error=f"{checkpoint / 'training_stats.json'} not written")
            return record
        timed = throughput["timing_source"].startswith("training_stats")
        own_total = throughput["compute_s"] if timed else None
    record.update(phases(timeline, run.started_at, run.wall_s, own_total))
    edges, seconds = throughput["edges"], throughput["compute_s"]
    record.update(
        edges=edges,
        timing_source=throughput["timing_source"],
        notes=timeline.notes,
        edges_per_s=ratio(edges, seconds),
        wall_edges_per_s=ratio(edges, run.wall_s),
        log_tail=tail(run.stdout, 3),
    )
    return record


def summarize(runs: list[dict[str, object]]) -> dict[str, object]:
    """Medians of every figure over the successful runs (each figure on its own)."""
    good = [r for r in runs if r["status"] == "ok"]
    medians: dict[str, object] = {"ok_runs": len(good), "runs": len(runs)}
    for key in SUMMARY_KEYS:
        values = [r[key] for r in good if r.get(key) is not None]
        medians[key] = statistics.median(values) if values else None
    return medians


def run_case(
    case: WholeRunCase, sides: list[SideCommands], args: argparse.Namespace, env: dict[str, str]
) -> dict[str, object]:
    """Import once, warm up each side, then alternate measured runs; medians and the verdict."""
    epochs = args.epochs or case.epochs
    prepared = prepare(case, args.seed)
    print(f"[{case.name}] {case.title}: {prepared.graph.name}, {epochs} epochs, {args.repeats} repeat(s)", flush=True)
    record: dict[str, object] = {
        "title": case.title,
        "epochs": epochs,
        "repeats": args.repeats,
        "config_file": str(prepared.config),
        "graph": prepared.graph_summary,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with measurement_lock(args.lock):
        record["import"] = run_import(ours_commands(args.seed), prepared.config, prepared.graph, prepared.workdir)
    if record["import"]["status"] == "failed":
        print(f"[{case.name}] import failed:\n{record['import']['run']['stderr_tail']}", flush=True)
        return {**record, "failed": True}
    record["warmup"] = {
        side.name: _report(case, side, "warm-up", run_train(side, prepared, 1, "warmup", env, args.lock))
        for side in sides
    }
    runs: dict[str, list[dict[str, object]]] = {side.name: [] for side in sides}
    for repeat in range(args.repeats):
        for side in sides:
            result = run_train(side, prepared, epochs, str(repeat), env, args.lock)
            runs[side.name].append(_report(case, side, f"run {repeat + 1}", result))
    record["runs"] = runs
    record["summary"] = {name: summarize(side_runs) for name, side_runs in runs.items()}
    record["comparison"] = compare(case, record["summary"])
    record["failed"] = any(r["status"] != "ok" for rs in runs.values() for r in rs) or any(
        w["status"] != "ok" for w in record["warmup"].values()
    )
    return record


def _report(case: WholeRunCase, side: SideCommands, label: str, result: dict) -> dict:
    """Print one line about a finished command (its stderr tail if it failed); return it."""
    if result["status"] == "ok":
        print(f"[{case.name}] {side.name} {label}: {result['wall_s']:.2f} s", flush=True)
    else:
        detail = result.get("error") or result["run"]["stderr_tail"]
        print(f"[{case.name}] {side.name} {label}: FAILED (exit {result['run']['returncode']})\n{detail}", flush=True)
    return result


def compare(case: WholeRunCase, summary: dict[str, dict]) -> dict[str, object]:
    """PBG wall / our wall (medians), the bar, and the train edges/s ratio."""
    pbg, ours = summary.get("pbg", {}), summary.get("ours", {})
    speed = ratio(pbg.get("wall_s"), ours.get("wall_s"))
    return {
        "speed": speed,
        "target": case.target,
        "pass": None if speed is None else speed >= case.target,
        "edges_per_s_ratio": ratio(ours.get("edges_per_s"), pbg.get("edges_per_s")),
        "same_edges": pbg.get("edges") == ours.get("edges") if pbg.get("edges") else None,
    }


def write_results(name: str, records: dict[str, dict], notes: list[str]) -> Path:
    """Merge ``records`` into bench/results/<name>.json, keeping entries of other cases."""
    path = RESULTS_DIR / f"{name}.json"
    previous = json.loads(path.read_text()).get("runs", {}) if path.exists() else {}
    return write_json(name, {"machine": machine_info(), "notes": notes, "runs": {**previous, **records}})


# ---- where a command's time goes, read from its log (the markers are in the module docstring) ----
@dataclass(frozen=True)
class Interval:
    """One bucket's training: wall-clock start/end (epoch seconds), edges, own compute seconds."""

    start: float
    end: float
    edges: int
    seconds: float


@dataclass
class Timeline:
    """What a log says about a run: training intervals in order, markers, parse notes."""

    intervals: list[Interval] = field(default_factory=list)
    last_commit: float | None = None
    first_bucket_marker: float | None = None
    notes: list[str] = field(default_factory=list)


def parse_pbg(text: str) -> Timeline:
    """Timeline of a ``torchbiggraph_train`` log (its stdout)."""
    timeline = Timeline()
    for line in text.splitlines():
        match = PBG_LINE.match(line)
        if not match:
            continue
        when, message = pbg_time(match["stamp"]), match["message"]
        if processed := PBG_PROCESSED.search(message):
            seconds = float(processed.group(2))
            timeline.intervals.append(Interval(when - seconds, when, int(processed.group(1)), seconds))
        elif PBG_BUCKET_START.search(message) and timeline.first_bucket_marker is None:
            timeline.first_bucket_marker = when
        elif PBG_COMMIT in message:
            timeline.last_commit = when
    if not timeline.intervals:
        timeline.notes.append("no 'Processed N edges in T s' line in PBG's log")
    return timeline


def parse_ours(text: str, spawn: float) -> Timeline:
    """Timeline of a ``pbg train`` log (stdout and stderr), clock times placed near ``spawn``."""
    timeline = Timeline()
    open_start: dict[tuple[str, str], float] = {}
    derived = 0
    for line in text.splitlines():
        match = LOG_LINE.match(line)
        if not match:
            continue
        message = match["rest"]
        if start := TRAINING.search(message):
            when = clock_time(match["clock"], spawn)
            open_start[start.group(1, 2)] = when
            if timeline.first_bucket_marker is None:
                timeline.first_bucket_marker = when
        elif end := TRAINED.search(message):
            when, seconds = clock_time(match["clock"], spawn), float(end.group(4))
            began = open_start.pop(end.group(1, 2), None)
            if began is None:
                began, derived = when - seconds, derived + 1
            timeline.intervals.append(Interval(began, when, int(end.group(3)), seconds))
        elif COMMITTING.search(message):
            timeline.last_commit = clock_time(match["clock"], spawn)
    if derived:
        timeline.notes.append(
            f"{derived} 'trained' line(s) without a 'training N edges on W workers' line before them: start = end - T"
        )
    if not timeline.intervals:
        timeline.notes.append("no 'bucket (l, r): trained N edges in T s' line from pbg_core.session.engine")
    if timeline.last_commit is None:
        timeline.notes.append("no 'committing version V' line: shutdown after the last commit unknown")
    return timeline


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def phases(timeline: Timeline, spawn: float, wall_s: float, training_s: float | None = None) -> dict[str, object]:
    """Split a run's wall time along its timeline (seconds; None where a marker is missing).

    Args:
        timeline: The parsed log.
        spawn: Wall clock at spawn (epoch seconds).
        wall_s: Spawn -> exit.
        training_s: The tool's own total compute seconds if known more precisely than the log's
            rounded ``T`` (ours: training_stats.json); else the sum of the intervals' ``T``.

    Returns:
        ``startup_s`` (spawn -> first training start), ``training_s``, ``iterations``,
        ``gaps_s`` (each end -> next start), ``gap_median_s``, ``gap_mean_s``, ``gaps_total_s``,
        ``tail_s`` (last training end -> exit), ``shutdown_s`` (last commit -> exit, when the
        commit marker follows the last training), ``other_s`` (wall minus the four parts: the
        log lines' distance from each tool's own timer), ``first_bucket_marker_s``.
    """
    intervals = timeline.intervals
    if not intervals:
        return {
            "startup_s": None,
            "training_s": training_s,
            "iterations": 0,
            "gaps_s": [],
            "gap_median_s": None,
            "gap_mean_s": None,
            "gaps_total_s": None,
            "tail_s": None,
            "shutdown_s": None,
            "other_s": None,
            "first_bucket_marker_s": None,
        }
    exit_at = spawn + wall_s
    gaps = [later.start - earlier.end for earlier, later in zip(intervals, intervals[1:], strict=False)]
    training = training_s if training_s is not None else sum(i.seconds for i in intervals)
    startup, tail = intervals[0].start - spawn, exit_at - intervals[-1].end
    commit = timeline.last_commit
    marker = timeline.first_bucket_marker
    return {
        "startup_s": startup,
        "training_s": training,
        "iterations": len(intervals),
        "gaps_s": gaps,
        "gap_median_s": _median(gaps),
        "gap_mean_s": statistics.fmean(gaps) if gaps else None,
        "gaps_total_s": sum(gaps),
        "tail_s": tail,
        "shutdown_s": exit_at - commit if commit is not None and commit >= intervals[-1].end else None,
        "other_s": wall_s - startup - training - sum(gaps) - tail,
        "first_bucket_marker_s": marker - spawn if marker is not None else None,
    }


# ---- the tables ---------------------------------------------------------------------------------
def summary_rows(records: dict[str, dict], bars: dict[str, float]) -> list[list[object]]:
    """One row per case: walls, speed ratio, bar (``bars``: the case's PBG/ours target), verdict, train edges/s."""
    rows = []
    for name, rec in records.items():
        summ, cmp = rec.get("summary", {}), rec.get("comparison", {})
        pbg, ours = summ.get("pbg", {}), summ.get("ours", {})
        rows.append(
            [
                f"{name} ({rec['epochs']} ep)",
                pbg.get("wall_s"),
                ours.get("wall_s"),
                cmp.get("speed"),
                f">= {bars[name]:g}x",
                verdict(cmp.get("pass")),
                pbg.get("edges_per_s"),
                ours.get("edges_per_s"),
                cmp.get("edges_per_s_ratio"),
            ]
        )
    return rows


def breakdown_rows(records: dict[str, dict]) -> list[list[object]]:
    """One row per case and side: wall = start-up + training + gaps + tail (+ other), medians."""

    def ms(value: object) -> float | None:
        return None if value is None else 1000 * value

    rows = []
    for name, rec in records.items():
        for side, med in rec.get("summary", {}).items():
            rows.append(
                [
                    name,
                    side,
                    med["wall_s"],
                    med["startup_s"],
                    med["training_s"],
                    med["iterations"],
                    ms(med["gap_median_s"]),
                    ms(med["gap_mean_s"]),
                    med["gaps_total_s"],
                    med["tail_s"],
                    med["shutdown_s"],
                    med["other_s"],
                    med["peak_rss_mib"],
                ]
            )
    return rows


def print_tables(records: dict[str, dict], bars: dict[str, float]) -> None:
    """The verdict table (``bars``: each case's PBG/ours target), the breakdown table and every measured wall time."""
    print(
        format_table(
            [
                "run",
                "PBG wall s",
                "ours wall s",
                "PBG/ours",
                "bar",
                "verdict",
                "PBG edges/s",
                "ours edges/s",
                "ours/PBG edges/s",
            ],
            summary_rows(records, bars),
        )
    )
    print()
    print(
        format_table(
            [
                "run",
                "side",
                "wall s",
                "start-up s",
                "training s",
                "iters",
                "gap med ms",
                "gap mean ms",
                "gaps s",
                "tail s",
                "shutdown s",
                "other s",
                "peak RSS MiB",
            ],
            breakdown_rows(records),
        )
    )
    for name, rec in records.items():
        walls = {
            side: " ".join(f"{r['wall_s']:.2f}" if r["status"] == "ok" else "FAILED" for r in runs)
            for side, runs in rec.get("runs", {}).items()
        }
        print(f"{name} wall times s: " + "; ".join(f"{side} {w}" for side, w in walls.items()))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Whole train commands, PBG 1.0.0 vs pbg-flow.")
    parser.add_argument("--only", choices=list(CASES), help="run one case only")
    parser.add_argument("--repeats", type=int, default=3, help="measured runs per side (median)")
    parser.add_argument("--quick", action="store_true", help="umls only, 5 epochs, 1 repeat")
    parser.add_argument("--epochs", type=int, help="override every case's epoch count")
    parser.add_argument("--skip-pbg", action="store_true", help="run our side only")
    parser.add_argument("--skip-ours", action="store_true", help="run PBG's side only")
    parser.add_argument("--seed", type=int, default=0, help="graph seed and our -p seed")
    parser.add_argument("--lock", type=Path, help="flock this file around every measured command")
    args = parser.parse_args(argv)
    if args.quick:
        args.only, args.repeats, args.epochs = "umls", 1, args.epochs or 5
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ours_commands(args.seed)  # every run imports with our CLI, even with --skip-ours
    except ToolMissingError as error:
        print(f"whole_run: error: {error}", file=sys.stderr)
        return 1
    sides, notes = build_sides(args.skip_pbg, args.skip_ours, args.seed)
    for note in notes:
        print(f"skipping a side: {note}")
    if os.environ.pop("PREFECT_API_URL", None):
        notes.append("PREFECT_API_URL was set and is ignored: our runs use the embedded server")
    prefect_home = tempfile.mkdtemp(prefix="pbg-whole-run-prefect-")
    try:
        env = {"PREFECT_HOME": prefect_home}
        names = [args.only] if args.only else list(CASES)
        records = {name: run_case(CASES[name], sides, args, env) for name in names}
    finally:
        shutil.rmtree(prefect_home, ignore_errors=True)
    print_tables(records, {name: case.target for name, case in CASES.items()})
    path = write_results("whole_run_quick" if args.quick else "whole_run", records, notes)
    print(f"wrote {path}")
    return 1 if not sides or any(rec.get("failed") for rec in records.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
