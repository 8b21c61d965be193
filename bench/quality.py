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

Sweeping (issue 33's recipe search): ``--config PATH`` trains another config with the same relative
paths (e.g. examples/kg/umls.py); each ``-p FIELD=VALUE`` goes to both train and eval, before the
eval's own overrides (so ``num_uniform_negs=500`` trains with 500 and still ranks against every
entity); ``--split valid`` ranks the valid split filtering train and valid only (choose settings
there, never on test); ``--results NAME`` writes bench/results/NAME.json and keeps that sweep's
checkpoints in checkpoints/NAME/seedS, so sweeps do not overwrite each other. Each seed's record
holds the wall seconds of its train and eval commands, and the table their means. A reference
verdict is given on the test split only.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from collections.abc import Sequence
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
DEFAULT_RESULTS = "quality"
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


def import_argv(pbg: str, data: Path, config: Path = CONFIG) -> list[str]:
    """`pbg import` of the three splits; outputs are the config's edge_paths, in split order."""
    return [
        pbg,
        "import",
        str(config),
        *(str(data / f"{s}.txt") for s in SPLITS),
        *TSV_COLUMNS,
    ]


def checkpoint_dir(seed: int, results: str = DEFAULT_RESULTS) -> str:
    """A seed's checkpoint directory, relative to the set's workdir (a named sweep gets its own)."""
    return f"checkpoints/seed{seed}" if results == DEFAULT_RESULTS else f"checkpoints/{results}/seed{seed}"


def train_argv(
    pbg: str,
    seed: int,
    epochs: int | None,
    config: Path = CONFIG,
    overrides: Sequence[str] = (),
    results: str = DEFAULT_RESULTS,
) -> list[str]:
    """`pbg train` on the train split into this seed's own checkpoint directory.

    ``overrides`` (``FIELD=VALUE``) come after the config's own and before the bench's paths and seed.
    """
    fixed = ["edge_paths=edges/train", f"seed={seed}", f"checkpoint_path={checkpoint_dir(seed, results)}"]
    if epochs is not None:
        fixed.append(f"num_epochs={epochs}")
    return [pbg, "train", str(config), *[a for o in (*overrides, *fixed) for a in ("-p", o)]]


def eval_argv(
    pbg: str,
    seed: int,
    config: Path = CONFIG,
    overrides: Sequence[str] = (),
    split: str = "test",
    results: str = DEFAULT_RESULTS,
) -> list[str]:
    """Filtered all-negatives `pbg eval` of ``split``, JSON on the last stdout line.

    The test split filters train, valid and test; the valid split train and valid (the test
    edges stay unseen while settings are chosen). ``overrides`` go first, so the ranking's own
    settings (all entities as candidates) always win.
    """
    fixed = [
        f"edge_paths=edges/{split}",
        "relations.0.all_negs=true",
        "num_uniform_negs=0",
        f"checkpoint_path={checkpoint_dir(seed, results)}",
    ]
    known = SPLITS[: SPLITS.index(split) + 1]
    filters = [a for s in known for a in ("--filter-path", f"edges/{s}")]
    argv = [pbg, "eval", str(config), *[a for o in (*overrides, *fixed) for a in ("-p", o)]]
    return [*argv, "--filtered", *filters, "--json"]


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


class Sweep(NamedTuple):
    """What one bench run trains and ranks: the config, its -p overrides, the ranked split, the results name."""

    config: Path = CONFIG
    overrides: tuple[str, ...] = ()
    split: str = "test"
    results: str = DEFAULT_RESULTS


DEFAULT_SWEEP = Sweep()


def run_seed(
    pbg: str, workdir: Path, seed: int, epochs: int | None, dry_run: bool, sweep: Sweep = DEFAULT_SWEEP
) -> dict:
    """Train from scratch and evaluate one seed; metrics or the failing step's record."""
    if not dry_run:
        shutil.rmtree(workdir / checkpoint_dir(seed, sweep.results), ignore_errors=True)
    argv = train_argv(pbg, seed, epochs, sweep.config, sweep.overrides, sweep.results)
    logs = f"seed{seed}" if sweep.results == DEFAULT_RESULTS else f"{sweep.results}_seed{seed}"
    train = run_step(argv, workdir, f"train_{logs}", dry_run)
    train.pop("_stdout", None)
    if train["status"] == "failed":
        return {"seed": seed, "status": train["status"], "train": train}
    argv = eval_argv(pbg, seed, sweep.config, sweep.overrides, sweep.split, sweep.results)
    evaluation = run_step(argv, workdir, f"eval_{logs}", dry_run)
    stdout = str(evaluation.pop("_stdout", ""))
    record = {"seed": seed, "train": train, "eval": evaluation, "status": evaluation["status"]}
    if evaluation["status"] == "ok":
        try:
            record["metrics"] = parse_eval_json(stdout)
        except ValueError as error:
            record.update(status="failed", error=str(error))
    return record


def run_set(
    name: str, pbg: str, seeds: list[int], epochs: int | None, dry_run: bool, sweep: Sweep = DEFAULT_SWEEP
) -> dict:
    """Import one set (cached), then every seed; aggregate the seeds that succeeded."""
    workdir = WORK_DIR / "quality" / name
    print(f"[{name}]", flush=True)
    record: dict[str, object] = {"workdir": str(workdir), "reference": REFERENCES[name]._asdict()}
    if not (workdir / IMPORT_DONE).exists():
        if not dry_run:  # a half-finished import must not be mistaken for a complete one
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
        step = run_step(import_argv(pbg, DATA_DIR / name, sweep.config), workdir, "import", dry_run)
        step.pop("_stdout", None)
        record["import"] = step
        if step["status"] == "failed":
            return {**record, "status": "failed", "seeds": []}
        if step["status"] == "ok":
            (workdir / IMPORT_DONE).write_text("ok\n")
    runs = [run_seed(pbg, workdir, seed, epochs, dry_run, sweep) for seed in seeds]
    record["seeds"] = runs
    record.update(aggregate([r["metrics"] for r in runs if "metrics" in r], REFERENCES[name]))
    if sweep.split != "test":  # the references are test figures
        record["pass"] = None
    record.update(wall_seconds(runs))
    record["status"] = "ok" if all(r["status"] == "ok" for r in runs) else runs[-1]["status"]
    return record


def wall_seconds(runs: list[dict]) -> dict[str, float | None]:
    """Mean wall seconds over seeds of the train and eval commands that ran (None: none ran)."""
    means: dict[str, float | None] = {}
    for step in ("train", "eval"):
        times = [float(r[step]["wall_s"]) for r in runs if "wall_s" in r.get(step, {})]
        means[f"{step}_s"] = statistics.fmean(times) if times else None
    return means


def aggregate(metrics: list[dict[str, float]], reference: Reference) -> dict[str, object]:
    """Mean and sample std over seeds of mrr/r1/r10, plus PASS on mean MRR >= reference."""
    if not metrics:
        return {"mean": None, "std": None, "pass": None}
    keys = ("mrr", "r1", "r10", "r50", "pos_rank", "auc")
    mean = {k: statistics.fmean(m[k] for m in metrics) for k in keys}
    std = {k: statistics.stdev(m[k] for m in metrics) if len(metrics) > 1 else 0.0 for k in keys}
    return {"mean": mean, "std": std, "num_seeds": len(metrics), "pass": mean["mrr"] >= reference.mrr}


TABLE_HEADERS = ["set", "MRR", "Hits@1", "Hits@10", "PBG ref MRR/H@1/H@10", "verdict", "train s", "eval s"]


def table_rows(records: dict[str, dict]) -> list[list[object]]:
    """One row per set: measured mean±std, reference, verdict, mean train and eval wall seconds."""
    rows = []
    for name, record in records.items():
        ref, mean, std = REFERENCES[name], record.get("mean"), record.get("std")

        def cell(key: str) -> str:
            # Called within this iteration only, so the loop variables are the current ones.
            return "-" if mean is None else f"{mean[key]:.3f} ± {std[key]:.3f}"  # noqa: B023 - see the comment above

        verdict = {True: "PASS", False: "FAIL", None: record["status"]}[record.get("pass")]
        rows.append(
            [
                name,
                cell("mrr"),
                cell("r1"),
                cell("r10"),
                f"{ref.mrr:.2f} / {ref.r1:.2f} / {ref.r10:.2f}",
                verdict,
                record.get("train_s"),
                record.get("eval_s"),
            ]
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
    parser.add_argument(
        "--config", type=Path, default=CONFIG, help="config with the bench's relative paths (default: %(default)s)"
    )
    parser.add_argument(
        "-p", dest="overrides", action="append", default=[], metavar="FIELD=VALUE", help="override for train and eval"
    )
    parser.add_argument(
        "--split", choices=("valid", "test"), default="test", help="ranked split: valid filters train+valid"
    )
    parser.add_argument(
        "--results", default=DEFAULT_RESULTS, help="bench/results/NAME.json and checkpoints/NAME/ (default: quality)"
    )
    args = parser.parse_args(argv)
    args.sets = [s for s in args.sets.split(",") if s]
    unknown = sorted(set(args.sets) - set(REFERENCES))
    if unknown:
        parser.error(f"unknown set(s) {unknown}; known: {sorted(REFERENCES)}")
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        parser.error(f"-p takes FIELD=VALUE, got {bad}")
    if not args.results or "/" in args.results or args.results.startswith("."):
        parser.error(f"--results takes a plain file name stem, got {args.results!r}")
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        pbg = str(ours_bin("pbg"))
    except ToolMissingError as error:
        print(error, file=sys.stderr)
        return 2
    sweep = Sweep(args.config.resolve(), tuple(args.overrides), args.split, args.results)
    records = {name: run_set(name, pbg, args.seeds, args.epochs, args.dry_run, sweep) for name in args.sets}
    print(format_table(TABLE_HEADERS, table_rows(records)))
    if args.dry_run:
        return 0
    payload: dict[str, object] = {
        "machine": machine_info(),
        "config_file": str(sweep.config),
        "seeds": args.seeds,
        "epochs": args.epochs,
    }
    if sweep != DEFAULT_SWEEP:
        payload.update(overrides=list(sweep.overrides), split=sweep.split)
    path = write_json(sweep.results, {**payload, "sets": records})
    print(f"wrote {path}")
    if sweep.split != "test":
        return 0 if all(r["status"] == "ok" for r in records.values()) else 1
    return 0 if all(r.get("pass") for r in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
