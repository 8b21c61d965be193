"""Quality side by side: our `pbg` (PBG's defaults, the knowledge-graph recipe, the tuned config) vs
PyKEEN 1.11's best cheap recipe, on UMLS, Kinships and Nations; and, with ``--large``, PBG's
defaults vs the recipe on a planted knowledge graph of tens of thousands of entities.

Per set (data/kg/<set>, found as bench.quality finds it) and per row of ours, in
bench/work/quality_recipe/<set>/<row>/ (one import per row: the configs may lay out data
differently):
- ``defaults``: bench/configs/kg_complex.py (PBG's defaults, data/kg/README.md's setup);
- ``recipe``: examples/kg/<set>.py; absent, the row says ``skipped: no examples/kg/<set>.py``;
- ``tuned``: bench/configs/tuned_<set>.json (the best config of a tuning study), when present.
Every config keeps kg_complex.py's layout (``entity_path`` entities, ``edge_paths`` the importer's
outputs for train.txt, valid.txt, test.txt: edges/train, edges/valid, edges/test). Commands:
1. ``pbg import CONFIG train.txt valid.txt test.txt --lhs-col 0 --rel-col 1 --rhs-col 2`` (once);
2. per seed S (0, 1, 2): ``pbg train CONFIG -p edge_paths=edges/train -p seed=S
   -p checkpoint_path=checkpoints/seedS`` from scratch;
3. ``pbg eval CONFIG -p edge_paths=edges/test -p relations.0.all_negs=true -p num_uniform_negs=0
   -p checkpoint_path=checkpoints/seedS [VERSION] --filtered --filter-path edges/train
   --filter-path edges/valid --filter-path edges/test --json`` (VERSION: :func:`evaluated_version_args`).
PyKEEN's row: bench/lib/pykeen_quality.py in PyKEEN's virtualenv (``$PYKEEN_VENV``, default
bench/.pykeen-venv, ``make pykeen-venv``), one process per seed. Before anything runs, that script
checks every set's bundled splits against data/kg (``--check-only``) and the bench refuses to run
when one differs, naming the file.

Reported per row: MRR mean ± sample std over the seeds, Hits@1, Hits@10, training seconds (ours: the
buckets' ``timing.train`` summed from training_stats.json; PyKEEN: its pipeline's training time) and
whole seconds per seed (ours: the ``pbg train`` and ``pbg eval`` commands; PyKEEN: its process,
which trains and evaluates). A row of ours PASSes when its mean MRR reaches the issue's target
(UMLS 0.94, Kinships 0.84, Nations 0.75) and its whole seconds are below PyKEEN's. Published
figures follow, each with its source.

``--large``: bench.lib.graphs.planted_kg's default graph (40k entities, 40 relations, 400k train
edges), rows ``defaults`` and ``recipe`` (examples/kg/planted.py, the recipe's large-graph settings),
the same three commands, exact filtered ranking against all entities; reports the MRR gap.

Run: ``python -m bench.quality_recipe [--sets umls,kinships,nations] [--seeds 0,1,2] [--epochs E]
[--large] [--dry-run] [--report RESULT.json] [--results NAME]``; writes bench/results/quality_recipe.json
(``--large``: quality_recipe_large.json; ``--results NAME``: NAME.json). ``--report`` prints the
tables of a recorded result file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any, NamedTuple

from bench import quality
from bench.lib.graphs.planted_kg import PlantedShape, ensure_planted
from bench.lib.report import format_table, write_json
from bench.lib.stats import bucket_rows, total
from bench.lib.tools import BENCH_DIR, REPO_ROOT, WORK_DIR, ToolMissingError, machine_info, ours_bin
from bench.quality import CONFIG, DATA_DIR, IMPORT_DONE, REFERENCES, parse_eval_json, run_step
from storage.config_loader import load_config

TARGETS = {"umls": 0.94, "kinships": 0.84, "nations": 0.75}
ROWS = ("defaults", "recipe", "tuned")
LARGE_ROWS = ("defaults", "recipe")
LARGE_NAME = "planted"
PYKEEN_VENV = Path(os.environ.get("PYKEEN_VENV", BENCH_DIR / ".pykeen-venv"))
PYKEEN_SCRIPT = BENCH_DIR / "lib" / "pykeen_quality.py"
WORK = WORK_DIR / "quality_recipe"
METRICS = ("mrr", "r1", "r10", "train_s", "whole_s")
LABELS = {"defaults": "ours, PBG defaults", "recipe": "ours, recipe", "tuned": "ours, tuned", "pykeen": "PyKEEN"}


class Published(NamedTuple):
    """A published filtered figure triple and where it was published."""

    label: str
    mrr: float
    r1: float
    r10: float
    source: str


_CONVE = "Dettmers et al., Convolutional 2D Knowledge Graph Embeddings, AAAI 2018; github.com/TimDettmers/ConvE README"
PUBLISHED: dict[str, list[Published]] = {
    name: [Published("PyTorch-BigGraph, kg_complex.py setup", *REFERENCES[name], "data/kg/README.md")]
    for name in REFERENCES
}
PUBLISHED["umls"].append(Published("ConvE (its own UMLS split)", 0.94, 0.92, 0.99, _CONVE))
PUBLISHED["kinships"].append(Published("ConvE (its own Kinship split)", 0.83, 0.73, 0.98, _CONVE))
PUBLISHED["nations"].append(Published("ConvE (its own Nations split)", 0.82, 0.72, 1.00, _CONVE))


def evaluated_version_args(config: Path) -> list[str]:
    """What `pbg eval` is told about the checkpoint version to rank: ``--version best`` (the version
    ``best.json`` names, the one early stopping keeps) when ``config`` has a validation section,
    else nothing (the last committed version)."""
    return ["--version", "best"] if load_config(str(config)).validation is not None else []


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it (as the tables and skips name files)."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def row_config(row: str, name: str) -> Path:
    """The config file of one row of ours for data set ``name`` (it may not exist)."""
    if row == "defaults":
        return CONFIG
    if row == "recipe":
        return REPO_ROOT / "examples" / "kg" / f"{name}.py"
    if row == "tuned":
        return BENCH_DIR / "configs" / f"tuned_{name}.json"
    raise ValueError(f"unknown row {row!r}; known: {list(ROWS)}")


def eval_argv(pbg: str, config: Path, seed: int) -> list[str]:
    """bench.quality's filtered `pbg eval` of the test split, of the version :func:`evaluated_version_args` picks."""
    return [*quality.eval_argv(pbg, seed, config), *evaluated_version_args(config)]


def pykeen_argv(python: Path, name: str, seed: int | None) -> list[str]:
    """PyKEEN's run of one seed, or (``seed`` None) its check of the splits only."""
    argv = [str(python), str(PYKEEN_SCRIPT), name, str(DATA_DIR / name)]
    return [*argv, "--check-only"] if seed is None else [*argv, "--seed", str(seed)]


def train_seconds(checkpoint: Path) -> float | None:
    """Seconds the buckets spent training (``timing.train`` summed over training_stats.json)."""
    return total(bucket_rows(checkpoint), "timing", "train")


def run_ours_seed(pbg: str, config: Path, workdir: Path, seed: int, epochs: int | None, dry_run: bool) -> dict:
    """Train from scratch and rank one seed; its metrics and seconds, or the failing step's record."""
    checkpoint = workdir / "checkpoints" / f"seed{seed}"
    if not dry_run:
        shutil.rmtree(checkpoint, ignore_errors=True)
    train = run_step(quality.train_argv(pbg, seed, epochs, config), workdir, f"train_seed{seed}", dry_run)
    train.pop("_stdout", None)
    if train["status"] == "failed":
        return {"seed": seed, "status": train["status"], "train": train}
    evaluation = run_step(eval_argv(pbg, config, seed), workdir, f"eval_seed{seed}", dry_run)
    stdout = str(evaluation.pop("_stdout", ""))
    record: dict[str, Any] = {"seed": seed, "status": evaluation["status"], "train": train, "eval": evaluation}
    if evaluation["status"] == "ok":
        try:
            metrics = parse_eval_json(stdout)
        except ValueError as error:
            return {**record, "status": "failed", "error": str(error)}
        whole = float(train["wall_s"]) + float(evaluation["wall_s"])
        record["metrics"] = {**metrics, "train_s": train_seconds(checkpoint), "whole_s": whole}
    return record


def run_ours(row: str, name: str, data: Path, pbg: str, seeds: list[int], epochs: int | None, dry_run: bool) -> dict:
    """One row of ours on one data set: import (cached per row), then every seed, then the aggregate."""
    config = row_config(row, name)
    if not config.exists():
        return {"config": str(config), "status": f"skipped: no {shown(config)}"}
    workdir = WORK / name / row
    print(f"[{name}: {LABELS[row]}] {shown(config)}", flush=True)
    record: dict[str, Any] = {"config": str(config), "workdir": str(workdir)}
    if not (workdir / IMPORT_DONE).exists():
        if not dry_run:  # a half-finished import must not pass for a complete one
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
        step = run_step(quality.import_argv(pbg, data, config), workdir, "import", dry_run)
        step.pop("_stdout", None)
        record["import"] = step
        if step["status"] == "failed":
            return {**record, "status": "failed"}
        if step["status"] == "ok":
            (workdir / IMPORT_DONE).write_text("ok\n")
    runs = [run_ours_seed(pbg, config, workdir, seed, epochs, dry_run) for seed in seeds]
    return {**record, **summarize(runs)}


def pykeen_python() -> Path | None:
    """PyKEEN's virtualenv python, None when it is not built."""
    python = PYKEEN_VENV / "bin" / "python"
    return python if python.exists() else None


def check_pykeen_splits(names: list[str], dry_run: bool) -> str | None:
    """None when PyKEEN's bundled splits of every set equal data/kg's (or cannot be checked), else the refusal."""
    python = pykeen_python()
    if python is None and not dry_run:
        return None
    for name in names:
        step = run_step(
            pykeen_argv(python or PYKEEN_VENV / "bin" / "python", name, None), WORK, f"check_{name}", dry_run
        )
        if step["status"] == "failed":
            lines = [line for line in str(step["run"].get("stderr_tail", "")).splitlines() if line.strip()]
            return lines[-1] if lines else f"PyKEEN's splits of {name} could not be checked"
    return None


def run_pykeen(name: str, seeds: list[int], dry_run: bool) -> dict:
    """PyKEEN's recipe on one set, one process per seed (its JSON line parsed)."""
    python = pykeen_python()
    if python is None and not dry_run:
        return {"status": f"skipped: no PyKEEN virtualenv at {PYKEEN_VENV} (make pykeen-venv, or set PYKEEN_VENV)"}
    print(f"[{name}: PyKEEN]", flush=True)
    runs = []
    for seed in seeds:
        step = run_step(
            pykeen_argv(python or PYKEEN_VENV / "bin" / "python", name, seed), WORK, f"pykeen_{name}_{seed}", dry_run
        )
        stdout = str(step.pop("_stdout", ""))
        record: dict[str, Any] = {"seed": seed, "status": step["status"], "run": step}
        if step["status"] == "ok":
            try:
                result = json.loads(stdout.strip().splitlines()[-1])
            except (IndexError, json.JSONDecodeError):
                runs.append({**record, "status": "failed", "error": f"no JSON line on stdout: {stdout[-200:]!r}"})
                continue
            record["pykeen"] = result
            record["metrics"] = {
                "mrr": result["mrr"],
                "r1": result["hits_at_1"],
                "r10": result["hits_at_10"],
                "train_s": result["train_s"],
                "whole_s": float(step["wall_s"]),
            }
        runs.append(record)
    return summarize(runs)


def summarize(runs: list[dict]) -> dict[str, Any]:
    """The seeds' records with mean and sample std of every metric over the seeds that succeeded."""
    done = [run["metrics"] for run in runs if "metrics" in run]
    statuses = {run["status"] for run in runs}
    status = "ok" if statuses == {"ok"} else ("dry-run" if statuses == {"dry-run"} else "failed")
    if not done:
        return {"status": status, "seeds": runs, "mean": None, "std": None}
    mean, std = {}, {}
    for key in METRICS:
        values = [m[key] for m in done if m.get(key) is not None]
        mean[key] = statistics.fmean(values) if values else None
        std[key] = statistics.stdev(values) if len(values) > 1 else 0.0 if values else None
    return {"status": status, "seeds": runs, "num_seeds": len(done), "mean": mean, "std": std}


def verdict(name: str, row: dict, pykeen: dict) -> str:
    """PASS when the mean MRR reaches the set's target in fewer whole seconds than PyKEEN's; else why not."""
    mean = row.get("mean")
    if mean is None:
        return str(row.get("status", "n/a"))
    if row.get("status") == "failed":
        return f"failed: {row['num_seeds']} of {len(row['seeds'])} seeds finished"
    if mean["mrr"] < TARGETS[name]:
        return f"FAIL: MRR {mean['mrr']:.3f} < {TARGETS[name]}"
    theirs = (pykeen.get("mean") or {}).get("whole_s")
    if theirs is None:
        return "MRR PASS, time n/a (no PyKEEN row)"
    if mean["whole_s"] >= theirs:
        return f"FAIL: {mean['whole_s']:.1f} s >= PyKEEN's {theirs:.1f} s"
    return "PASS"


def _cells(row: dict) -> list[object]:
    mean, std = row.get("mean"), row.get("std")
    if mean is None:
        return [None] * 5
    mrr = f"{mean['mrr']:.3f} ± {std['mrr']:.3f}"
    return [mrr, mean["r1"], mean["r10"], mean["train_s"], mean["whole_s"]]


HEADERS = ["row", "MRR", "Hits@1", "Hits@10", "train s", "whole s", "verdict / source"]


def set_table(name: str, record: dict) -> str:
    """One data set's table: the rows of ours with verdicts, PyKEEN's, then the published figures."""
    rows, pykeen = record["rows"], record["pykeen"]
    lines = [[LABELS[row], *_cells(rows[row]), verdict(name, rows[row], pykeen)] for row in rows]
    lines.append([LABELS["pykeen"], *_cells(pykeen), "reference" if pykeen.get("mean") else pykeen["status"]])
    for paper in PUBLISHED[name]:
        figures = [f"{value:.2f}" for value in (paper.mrr, paper.r1, paper.r10)]  # as published
        lines.append([f"published: {paper.label}", *figures, None, None, paper.source])
    return f"{name} (target MRR >= {TARGETS[name]})\n" + format_table(HEADERS, lines)


def large_table(record: dict) -> str:
    """The planted graph's table and the recipe's gap over PBG's defaults."""
    rows = record["rows"]
    lines = [[LABELS[row], *_cells(rows[row]), rows[row]["status"]] for row in rows]
    graph = record["graph"]
    ceiling = f", the generator's own ranking: MRR {graph['oracle_test_mrr']}" if "oracle_test_mrr" in graph else ""
    text = f"{LARGE_NAME} ({graph['entities']:,} entities, {graph['train_edges']:,} train edges{ceiling})\n"
    text += format_table(HEADERS, lines)
    gap = large_gap(record)
    return text + ("" if gap is None else f"\nrecipe - defaults: MRR {gap['mrr']:+.3f} ({gap['ratio']:.2f}x)")


def large_gap(record: dict) -> dict[str, float] | None:
    """The recipe's mean MRR minus the defaults', and their ratio; None unless both rows have figures."""
    means = [record["rows"].get(row, {}).get("mean") for row in LARGE_ROWS]
    if any(mean is None for mean in means):
        return None
    defaults, recipe = means[0]["mrr"], means[1]["mrr"]
    return {"mrr": recipe - defaults, "ratio": recipe / defaults if defaults else float("inf")}


def report(payload: dict) -> str:
    """Every table of a result file (the one this bench writes)."""
    tables = [set_table(name, record) for name, record in payload.get("sets", {}).items()]
    if payload.get("large"):
        tables.append(large_table(payload["large"]))
    return "\n\n".join(tables)


def run_sets(args: argparse.Namespace, pbg: str) -> dict[str, Any]:
    """Every chosen set: our rows, then PyKEEN's."""
    records = {}
    for name in args.sets:
        rows = {row: run_ours(row, name, DATA_DIR / name, pbg, args.seeds, args.epochs, args.dry_run) for row in ROWS}
        records[name] = {"target": TARGETS[name], "rows": rows, "pykeen": run_pykeen(name, args.seeds, args.dry_run)}
    return records


def run_large(args: argparse.Namespace, pbg: str) -> dict[str, Any]:
    """The planted graph (generated once, cached): PBG's defaults vs the recipe."""
    shape = PlantedShape()
    data = WORK / LARGE_NAME / "data"
    graph = {"entities": shape.entities, "train_edges": shape.train_edges}
    if not args.dry_run:
        graph = ensure_planted(data, shape)
    rows = {row: run_ours(row, LARGE_NAME, data, pbg, args.seeds, args.epochs, args.dry_run) for row in LARGE_ROWS}
    record = {"graph": graph, "rows": rows}
    return {**record, "gap": large_gap(record)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description="Quality side by side: ours (defaults, recipe, tuned) vs PyKEEN.")
    parser.add_argument("--sets", default=",".join(TARGETS), help=f"comma-separated subset of {','.join(TARGETS)}")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    parser.add_argument("--epochs", type=int, help="override num_epochs of every config of ours")
    parser.add_argument("--large", action="store_true", help="the planted graph: PBG defaults vs the recipe")
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    parser.add_argument("--report", type=Path, help="print the tables of a recorded result file and stop")
    parser.add_argument("--results", help="write bench/results/RESULTS.json (default: quality_recipe[_large])")
    args = parser.parse_args(argv)
    args.sets = [s for s in args.sets.split(",") if s]
    unknown = sorted(set(args.sets) - set(TARGETS))
    if unknown:
        parser.error(f"--sets: unknown set(s) {unknown}; known: {sorted(TARGETS)}")
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the bench (or print a recorded one); 0 when every recipe row PASSes."""
    args = parse_args(argv)
    if args.report is not None:
        print(report(json.loads(args.report.read_text())))
        return 0
    try:
        pbg = str(ours_bin("pbg"))
    except ToolMissingError as error:
        print(error, file=sys.stderr)
        return 2
    payload: dict[str, Any] = {"machine": None if args.dry_run else machine_info(), "seeds": args.seeds}
    if args.large:
        payload["large"] = run_large(args, pbg)
    else:
        if not args.dry_run:
            WORK.mkdir(parents=True, exist_ok=True)
        refusal = check_pykeen_splits(args.sets, args.dry_run)
        if refusal is not None:
            print(refusal, file=sys.stderr)
            return 2
        payload["sets"] = run_sets(args, pbg)
    print(report(payload))
    if args.dry_run:
        return 0
    name = args.results or ("quality_recipe_large" if args.large else "quality_recipe")
    print(f"wrote {write_json(name, payload)}")
    return 0 if passed(payload) else 1


def passed(payload: dict) -> bool:
    """Every set's recipe row PASSes (``--large``: the recipe beats PBG's defaults)."""
    if "large" in payload:
        gap = payload["large"].get("gap")
        return gap is not None and gap["mrr"] > 0
    return all(
        verdict(name, record["rows"]["recipe"], record["pykeen"]) == "PASS" for name, record in payload["sets"].items()
    )


if __name__ == "__main__":
    sys.exit(main())
