"""The two parts of bench/cluster_scaling.py: quality parity, and scaling with its ceiling measurement.

- quality: per seed, each setting of :data:`SETTINGS` (1 machine; 2 with the delta merge; 2
  averaging) trained and evaluated (:func:`run_quality`), a finished seed's record reused by a
  later invocation with the same commands (:func:`cached_quality`);
- scaling: per round, 1 then 2 machines, then the ceiling pair (:func:`ceiling_pair`: two
  1-machine trainings at once, each on its own PREFECT_HOME); the rounds' figures and their
  medians (:func:`scaling_figures`, :func:`scaling_summary`), the bar on
  ``aggregate_train_rate_ratio``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from _common import ours_bin, ratio, tail
from cluster_scaling_runs import Job, evaluate, fresh_checkpoint, run_together, train_argv, train_record, train_run

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
