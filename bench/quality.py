"""Link-prediction quality of our `pbg` on UMLS, Kinships and Nations vs PBG's reference figures.

Per set (data/kg/<set>/{train,valid,test}.txt, ``head<TAB>rel<TAB>tail``), with the config
bench/configs/kg_complex.py (the data/kg README setup), all commands run in
bench/work/quality/<set>/:
1. ``pbg import CONFIG train.txt valid.txt test.txt --lhs-col 0 --rel-col 1 --rhs-col 2`` (once);
2. per seed S: ``pbg train CONFIG -p edge_paths=edges/train -p seed=S
   -p checkpoint_path=checkpoints/seedS`` (from scratch);
3. ``pbg eval CONFIG -p edge_paths=edges/test -p relations.0.all_negs=true
   -p num_uniform_negs=0 -p checkpoint_path=checkpoints/seedS --filtered
   --filter-path edges/train --filter-path edges/valid --filter-path edges/test --json``; the
   LAST stdout line is a JSON object with mrr, r1, r10, r50, pos_rank, auc, count.
Reported: mean and sample std over seeds of filtered MRR, Hits@1, Hits@10, next to PBG's
reference (data/kg/README.md); PASS when mean MRR >= the reference MRR.

Run: ``python -m bench.quality [--sets umls,nations] [--seeds 0,1,2] [--epochs 50] [--dry-run]``;
writes bench/results/quality.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

from bench.lib.report import format_table, mib, write_json
from bench.lib.runner import run_measured, tail
from bench.lib.tools import (
    BENCH_DIR,
    REPO_ROOT,
    TSV_COLUMNS,
    WORK_DIR,
    ToolMissingError,
    eval_metrics,
    machine_info,
    ours_bin,
)

CONFIG = BENCH_DIR / "configs" / "kg_complex.py"
DATA_DIR = REPO_ROOT / "data" / "kg"
SPLITS = ("train", "valid", "test")
EVAL_KEYS = ("mrr", "r1", "r10", "r50", "pos_rank", "auc", "count")
IMPORT_DONE = "import.done"


class Reference(NamedTuple):
    """PBG's filtered figures for one set (data/kg/README.md)."""

    mrr: float
    r1: float
    r10: float


REFERENCES = {
    "umls": Reference(0.81, 0.64, 0.99),
    "kinships": Reference(0.79, 0.68, 0.98),
    "nations": Reference(0.67, 0.50, 0.99),
}


def import_argv(pbg: str, data: Path) -> list[str]:
    """`pbg import` of the three splits; outputs are the config's edge_paths, in split order."""
    return [
        pbg,
        "import",
        str(CONFIG),
        *(str(data / f"{s}.txt") for s in SPLITS),
        *TSV_COLUMNS,
    ]


def train_argv(pbg: str, seed: int, epochs: int | None) -> list[str]:
    """`pbg train` on the train split into this seed's own checkpoint directory."""
    overrides = ["edge_paths=edges/train", f"seed={seed}", f"checkpoint_path=checkpoints/seed{seed}"]
    if epochs is not None:
        overrides.append(f"num_epochs={epochs}")
    return [pbg, "train", str(CONFIG), *[a for o in overrides for a in ("-p", o)]]


def eval_argv(pbg: str, seed: int) -> list[str]:
    """Filtered all-negatives `pbg eval` of the test split, JSON on the last stdout line."""
    overrides = [
        "edge_paths=edges/test",
        "relations.0.all_negs=true",
        "num_uniform_negs=0",
        f"checkpoint_path=checkpoints/seed{seed}",
    ]
    filters = [a for s in SPLITS for a in ("--filter-path", f"edges/{s}")]
    return [pbg, "eval", str(CONFIG), *[a for o in overrides for a in ("-p", o)], "--filtered", *filters, "--json"]


def parse_eval_json(stdout: str) -> dict[str, float]:
    """The metrics object on the last non-empty stdout line of `pbg eval --json`.

    Raises:
        ValueError: If that line is not a JSON object holding every key of EVAL_KEYS.
    """
    metrics = eval_metrics(stdout)
    missing = [key for key in EVAL_KEYS if key not in metrics]
    if missing:
        raise ValueError(f"eval JSON lacks {missing}; expected keys {list(EVAL_KEYS)}")
    return {key: float(metrics[key]) for key in EVAL_KEYS}


def run_step(argv: list[str], workdir: Path, log_name: str, dry_run: bool) -> dict[str, object]:
    """Run one command (or only print it with ``dry_run``); record wall time and memory."""
    print("  $ " + " ".join(argv), flush=True)
    if dry_run:
        return {"status": "dry-run", "argv": argv}
    run = run_measured(argv, workdir, log_name)
    if not run.ok:
        print(f"  failed (exit {run.returncode}), see {run.stderr_path}:\n" + tail(run.stderr, 5), flush=True)
    return {
        "status": "ok" if run.ok else "failed",
        "wall_s": run.wall_s,
        "peak_rss_mib": mib(run.peak_rss_bytes),
        "run": run.summary(),
        "_stdout": run.stdout,
    }


def run_seed(pbg: str, workdir: Path, seed: int, epochs: int | None, dry_run: bool) -> dict:
    """Train from scratch and evaluate one seed; metrics or the failing step's record."""
    if not dry_run:
        shutil.rmtree(workdir / "checkpoints" / f"seed{seed}", ignore_errors=True)
    train = run_step(train_argv(pbg, seed, epochs), workdir, f"train_seed{seed}", dry_run)
    train.pop("_stdout", None)
    if train["status"] == "failed":
        return {"seed": seed, "status": train["status"], "train": train}
    evaluation = run_step(eval_argv(pbg, seed), workdir, f"eval_seed{seed}", dry_run)
    stdout = str(evaluation.pop("_stdout", ""))
    record = {"seed": seed, "train": train, "eval": evaluation, "status": evaluation["status"]}
    if evaluation["status"] == "ok":
        try:
            record["metrics"] = parse_eval_json(stdout)
        except ValueError as error:
            record.update(status="failed", error=str(error))
    return record


def run_set(name: str, pbg: str, seeds: list[int], epochs: int | None, dry_run: bool) -> dict:
    """Import one set (cached), then every seed; aggregate the seeds that succeeded."""
    workdir = WORK_DIR / "quality" / name
    print(f"[{name}]", flush=True)
    record: dict[str, object] = {"workdir": str(workdir), "reference": REFERENCES[name]._asdict()}
    if not (workdir / IMPORT_DONE).exists():
        if not dry_run:  # a half-finished import must not be mistaken for a complete one
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
        step = run_step(import_argv(pbg, DATA_DIR / name), workdir, "import", dry_run)
        step.pop("_stdout", None)
        record["import"] = step
        if step["status"] == "failed":
            return {**record, "status": "failed", "seeds": []}
        if step["status"] == "ok":
            (workdir / IMPORT_DONE).write_text("ok\n")
    runs = [run_seed(pbg, workdir, seed, epochs, dry_run) for seed in seeds]
    record["seeds"] = runs
    record.update(aggregate([r["metrics"] for r in runs if "metrics" in r], REFERENCES[name]))
    record["status"] = "ok" if all(r["status"] == "ok" for r in runs) else runs[-1]["status"]
    return record


def aggregate(metrics: list[dict[str, float]], reference: Reference) -> dict[str, object]:
    """Mean and sample std over seeds of mrr/r1/r10, plus PASS on mean MRR >= reference."""
    if not metrics:
        return {"mean": None, "std": None, "pass": None}
    keys = ("mrr", "r1", "r10", "r50", "pos_rank", "auc")
    mean = {k: statistics.fmean(m[k] for m in metrics) for k in keys}
    std = {k: statistics.stdev(m[k] for m in metrics) if len(metrics) > 1 else 0.0 for k in keys}
    return {"mean": mean, "std": std, "num_seeds": len(metrics), "pass": mean["mrr"] >= reference.mrr}


def table_rows(records: dict[str, dict]) -> list[list[object]]:
    """One row per set: measured mean±std, reference, verdict."""
    rows = []
    for name, record in records.items():
        ref, mean, std = REFERENCES[name], record.get("mean"), record.get("std")

        def cell(key: str) -> str:
            # Called within this iteration only, so the loop variables are the current ones.
            return "-" if mean is None else f"{mean[key]:.3f} ± {std[key]:.3f}"  # noqa: B023 - see the comment above

        verdict = {True: "PASS", False: "FAIL", None: record["status"]}[record.get("pass")]
        rows.append(
            [name, cell("mrr"), cell("r1"), cell("r10"), f"{ref.mrr:.2f} / {ref.r1:.2f} / {ref.r10:.2f}", verdict]
        )
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Filtered link-prediction quality vs PBG.")
    parser.add_argument(
        "--sets", default=",".join(REFERENCES), help=f"comma-separated subset of {','.join(REFERENCES)}"
    )
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    parser.add_argument("--epochs", type=int, help="override num_epochs (default: config's 50)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    args.sets = [s for s in args.sets.split(",") if s]
    unknown = sorted(set(args.sets) - set(REFERENCES))
    if unknown:
        parser.error(f"unknown set(s) {unknown}; known: {sorted(REFERENCES)}")
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        pbg = str(ours_bin("pbg"))
    except ToolMissingError as error:
        print(error, file=sys.stderr)
        return 2
    records = {name: run_set(name, pbg, args.seeds, args.epochs, args.dry_run) for name in args.sets}
    print(format_table(["set", "MRR", "Hits@1", "Hits@10", "PBG ref MRR/H@1/H@10", "verdict"], table_rows(records)))
    if args.dry_run:
        return 0
    path = write_json(
        "quality",
        {
            "machine": machine_info(),
            "config_file": str(CONFIG),
            "seeds": args.seeds,
            "epochs": args.epochs,
            "sets": records,
        },
    )
    print(f"wrote {path}")
    return 0 if all(r.get("pass") for r in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
