"""Whole `train` commands side by side, PyPI PBG 1.0.0 vs our `pbg`: where the wall time goes.

Three runs, each on one set of files imported once with our ``pbg import`` (PBG 1.0.0 reads
them: tests/compat checks it) and trained from scratch with one config file by both tools, a
fresh checkpoint directory per command:
- ``umls``: data/kg/umls/train.txt, examples/umls/config.py minus ``regularization_coef`` (PBG
  1.0.0 has no N3) and with ``hogwild_delay=0`` (PBG's 2 s epoch-0 sleep), 50 epochs;
- ``kg``: bench/configs/speed_c.py on bench/gen_kg.py's 257k-edge KG, 10 epochs;
- ``a``: bench/configs/speed_a.py on the 2M-edge power-law graph of bench/speed.py, 3 epochs.

Per run: one unmeasured warm-up command per side (1 epoch: our SQLite database in the script's
temporary PREFECT_HOME exists afterwards, numba and file caches are warm), then ``--repeats``
measured commands alternating PBG, ours, PBG, ours, ...; medians are reported. Each command is
timed from spawn to exit (bench/_common.run_measured, with the peak RSS of its process tree)
and its log split into start-up, training, gaps between iterations, and the tail after the last
training (bench/whole_run_logs.py says which line marks what). Bars, on PBG wall / our wall:
umls >= 1.0x, kg >= 2.0x, a >= 2.0x.

Run: ``python bench/whole_run.py [--only umls|kg|a] [--repeats 3] [--quick] [--skip-pbg]
[--skip-ours] [--lock /tmp/pbg-bench.lock]``. Writes bench/results/whole_run.json (``--quick``:
whole_run_quick.json); a run of some cases replaces those cases' entries and keeps the others.
Exit status 1 if any command failed.
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
from dataclasses import dataclass
from pathlib import Path

from _common import (
    REPO_ROOT,
    RESULTS_DIR,
    WORK_DIR,
    RunResult,
    ToolMissingError,
    machine_info,
    measurement_lock,
    mib,
    ratio,
    run_measured,
    tail,
    write_json,
)
from speed import CASES as SPEED_CASES
from speed import ensure_case_graph, load_config_dict
from speed_sides import (
    SideCommands,
    build_sides,
    ours_commands,
    read_training_stats,
    run_import,
    throughput_from_pbg,
    throughput_from_stats,
)
from whole_run_logs import parse_ours, parse_pbg, phases
from whole_run_tables import print_tables

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
    text = (
        f'"""Written by bench/whole_run.py from examples/umls/config.py: without {sorted(dropped)}'
        f" (unknown to PBG 1.0.0), hogwild_delay 0, eval_fraction 0 (as the demo), paths in this"
        f' directory."""\n\n\n'
        f"def get_torchbiggraph_config():\n    return {config!r}\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
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
    log = run.stdout + "\n" + run.stderr
    if side.tool == "pbg":
        timeline, throughput, own_total = parse_pbg(log), throughput_from_pbg(run), None
    else:
        timeline = parse_ours(log, run.started_at)
        stats = checkpoint / "training_stats.json"
        if not stats.exists():
            record.update(status="failed", error=f"{stats} not written")
            return record
        throughput = throughput_from_stats(read_training_stats(stats), run.wall_s)
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
