"""Incremental retraining on a growing graph vs training from scratch every day (issue 17's bars).

Simulated days (``retrain_days_data.py``): a planted graph of 800k edges, 40k nodes; day 0 holds
70% of the training edges in time-like order (10% of the nodes first appear later), days 1-5 add
6% each; one final test split for every regime.

Regimes, every step a real command (``pbg import``, ``pbg train``, ``pbg eval``):

- **scratch**: each day, a plain import of all days so far and ``--scratch-epochs`` from nothing;
- **incremental**: day 0 as scratch; then each day ``pbg import --append`` of that day and
  ``--epochs`` epochs of all edges so far, from the previous day's model (``init_path``), new
  entities started at random or (second series) at their trained neighbors' mean
  (``init_new_entities``).

Reported: filtered MRR and Hits@10 of each final model on the test split (all entities ranked,
known edges filtered), also on the test edges touching an entity first seen after day 0 ("new")
and after the last day ("last day"); for the last day's entities also the grown model before any
training ("untrained": the start random or neighbor-mean gives them);
cumulative seconds of the ``pbg train`` commands (whole command, start-up included) and of the
training itself (``timing.train`` of the stats), with the ratio to scratch; train edges/s.

Run: ``.venv/bin/python -m bench.retrain_days`` (about 10 minutes); ``--quick`` is a small smoke
version. Results: bench/results/retrain_days.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from bench.lib import stats
from bench.lib.graphs.days import DayPlan, ensure_days
from bench.lib.report import format_table, ratio, write_json
from bench.lib.runner import run_measured
from bench.lib.tools import WORK_DIR, eval_metrics, machine_info, ours_bin

INITS = ("random", "neighbor_mean")
TESTS = ("test", "test_new", "test_last")


def base_config(data: Path, edges: list[Path], checkpoint: Path, epochs: int) -> dict[str, Any]:
    """The model every regime trains (one partition, so all_negs ranks every entity)."""
    return {
        "entity_path": str(data),
        "edge_paths": [str(p) for p in edges],
        "checkpoint_path": str(checkpoint),
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "follows", "lhs": "node", "rhs": "node", "operator": "none"}],
        "dimension": 64,
        "comparator": "dot",
        "loss_fn": "softmax",
        "lr": 0.1,
        "batch_size": 1000,
        "num_batch_negs": 50,
        "num_uniform_negs": 50,
        "eval_fraction": 0,
        "num_epochs": epochs,
        "seed": 0,
    }


def pbg(args: list[Any], cwd: Path, log: str) -> dict[str, Any]:
    """Run ``pbg ARGS``; its wall seconds and stdout. Exits with the command's error on failure."""
    result = run_measured([ours_bin(), *args], cwd, log)
    if result.returncode != 0:
        sys.exit(f"pbg {args[0]} failed ({cwd}/{log}.err):\n{result.stderr[-3000:]}")
    return {"wall_s": result.wall_s, "stdout": result.stdout}


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2))
    return path


def import_days(config: Path, inputs: list[Path], cwd: Path, log: str, append: bool = False) -> float:
    args: list[Any] = ["import", config, *inputs, "--lhs-col", "0", "--rhs-col", "1", "-p", "seed=0"]
    return float(pbg([*args, *(["--append"] if append else [])], cwd, log)["wall_s"])


def train(config: Path, cwd: Path, log: str) -> dict[str, Any]:
    """``pbg train``: whole-command seconds, training seconds and edges from its stats."""
    wall = pbg(["train", config], cwd, log)["wall_s"]
    checkpoint = Path(json.loads(config.read_text())["checkpoint_path"])
    rows = stats.bucket_rows(checkpoint)
    seconds = stats.total_or_zero(rows, "timing", "train")
    edges = stats.edges(rows)
    return {"wall_s": wall, "train_s": seconds, "edges": edges, "edges_per_s": ratio(edges, seconds)}


def evaluate(config: Path, tests: dict[str, Path], filters: list[Path], cwd: Path) -> dict[str, Any]:
    """Filtered MRR / Hits@10 of the config's checkpoint on each test edge path (every entity ranked)."""
    out = {}
    for name, path in tests.items():
        args: list[Any] = ["eval", config, "--filtered", "--json", "-p", "relations.0.all_negs=true"]
        args += ["-p", f"edge_paths={path}", *[a for f in [*filters, path] for a in ("--filter-path", f)]]
        metrics = eval_metrics(pbg(args, cwd, f"eval-{name}")["stdout"])
        out[name] = {"mrr": metrics["mrr"], "r10": metrics["r10"], "count": metrics["count"]}
    return out


def scratch_regime(days: list[Path], tests: dict[str, Path], work: Path, epochs: int) -> dict[str, Any]:
    """Each day: a plain import of every day so far (and, on the last, the tests), then train from nothing."""
    steps = []
    for day in range(len(days)):
        root = work / "scratch" / f"day{day}"
        shutil.rmtree(root, ignore_errors=True)
        last = day == len(days) - 1
        inputs = [*days[: day + 1], *(tests.values() if last else [])]
        edges = [root / "edges" / f"day{i}" for i in range(day + 1)]
        paths = [*edges, *([root / "edges" / name for name in tests] if last else [])]
        importing = write_config(root / "import.json", base_config(root / "data", paths, root / "model", epochs))
        seconds = import_days(importing, inputs, root, "import")
        config = write_config(root / "train.json", base_config(root / "data", edges, root / "model", epochs))
        steps.append({"day": day, "import_s": seconds, **train(config, root, "train")})
        print(f"scratch day {day}: {steps[-1]['wall_s']:.1f} s", flush=True)
    quality = evaluate(config, {n: root / "edges" / n for n in tests}, edges, root)
    return {"steps": steps, "quality": quality}


def incremental_regime(
    days: list[Path], tests: dict[str, Path], work: Path, epochs: tuple[int, int], day0: dict[str, Any]
) -> dict[str, Any]:
    """Day 0 is scratch's (the same import and training); then each day: append it, and per init grow, train.

    Both inits train day d before day d+1 is appended: a model never sees rows of entities not yet
    arrived (they would start random, untouched, and neighbor means would never apply).
    """
    root = work / "incremental"
    data, edges = root / "data", [root / "edges" / f"day{i}" for i in range(len(days))]
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(work / "scratch" / "day0" / "data", data)  # appends must not touch scratch's
    shutil.copytree(work / "scratch" / "day0" / "edges" / "day0", edges[0])
    series: dict[str, Any] = {init: {"steps": [day0]} for init in INITS}
    previous = dict.fromkeys(INITS, work / "scratch" / "day0" / "model")
    for day in range(1, len(days)):
        grow = write_config(root / f"append{day}.json", base_config(data, [edges[day]], root / "x", epochs[1]))
        seconds = import_days(grow, [days[day]], root, f"import-day{day}", append=True)
        if day == len(days) - 1:  # the tests (no new entity in them): the cold start is evaluated on them
            test_config = write_config(
                root / "tests.json", base_config(data, [root / "edges" / n for n in tests], root, 1)
            )
            import_days(test_config, list(tests.values()), root, "import-tests", append=True)
        for init in INITS:
            model = root / init / f"day{day}"
            shutil.rmtree(model, ignore_errors=True)
            config = base_config(data, edges[: day + 1], model, epochs[1]) | {"init_path": str(previous[init])}
            config |= {"init_new_entities": init}
            if day == len(days) - 1:  # the last day's new entities as they start, before any training
                series[init]["cold_start"] = cold_start(config, root / init, edges)
            path = write_config(root / init / f"day{day}.json", config)
            series[init]["steps"].append({"day": day, "import_s": seconds, **train(path, root / init, f"day{day}")})
            series[init]["config"], previous[init] = path, model
            print(f"incremental ({init}) day {day}: {series[init]['steps'][-1]['wall_s']:.1f} s", flush=True)
    for init in INITS:
        tested = {n: root / "edges" / n for n in tests}
        series[init]["quality"] = evaluate(series[init].pop("config"), tested, edges, root / init)
    return series


def cold_start(config: dict[str, Any], cwd: Path, filters: list[Path]) -> dict[str, Any]:
    """The grown model untrained (one epoch at learning rate 0) on the test edges of the last day's entities."""
    frozen = config | {"checkpoint_path": str(cwd / "cold"), "num_epochs": 1, "lr": 0.0, "relation_lr": 0.0}
    shutil.rmtree(cwd / "cold", ignore_errors=True)
    path = write_config(cwd / "cold.json", frozen)
    pbg(["train", path], cwd, "cold")
    test_root = Path(config["entity_path"]).parent / "edges"
    return evaluate(path, {"test_last": test_root / "test_last"}, filters, cwd)["test_last"]


def summary_rows(scratch: dict[str, Any], incremental: dict[str, Any]) -> tuple[list[list[Any]], dict[str, Any]]:
    """One table row per regime and the bar figures."""

    def totals(steps: list[dict[str, Any]]) -> tuple[float, float, float]:
        return tuple(sum(s[k] for s in steps) for k in ("wall_s", "train_s", "edges"))  # type: ignore[return-value]

    base_wall, base_train, _ = totals(scratch["steps"])
    rows, bars = [], {}
    for name, regime in [("scratch", scratch), *((f"incremental {i}", incremental[i]) for i in INITS)]:
        wall, seconds, edges = totals(regime["steps"])
        q = regime["quality"]
        cold = regime.get("cold_start", {}).get("mrr")
        rows.append(
            [name, q["test"]["mrr"], q["test"]["r10"], q["test_new"]["mrr"], q["test_last"]["mrr"], cold,
             wall, seconds, ratio(wall, base_wall), ratio(seconds, base_train), ratio(edges, seconds)]
        )  # fmt: skip
    best = incremental["neighbor_mean"]["quality"]
    bars["mrr_delta"] = best["test"]["mrr"] - scratch["quality"]["test"]["mrr"]
    bars["new_entity_mrr_delta"] = best["test_new"]["mrr"] - scratch["quality"]["test_new"]["mrr"]
    bars["whole_command_ratio"] = ratio(totals(incremental["neighbor_mean"]["steps"])[0], base_wall)
    bars["training_ratio"] = ratio(totals(incremental["neighbor_mean"]["steps"])[1], base_train)
    bars["neighbor_mean_vs_random_new_mrr"] = (
        best["test_new"]["mrr"] - incremental["random"]["quality"]["test_new"]["mrr"]
    )
    bars["neighbor_mean_vs_random_cold_start_mrr"] = (
        incremental["neighbor_mean"]["cold_start"]["mrr"] - incremental["random"]["cold_start"]["mrr"]
    )
    return rows, bars


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch-epochs", type=int, default=10, help="epochs of each from-scratch run (and day 0)")
    parser.add_argument("--epochs", type=int, default=2, help="epochs of each incremental run")
    parser.add_argument("--quick", action="store_true", help="a 100k-edge smoke run, 4 and 1 epochs")
    args = parser.parse_args(argv)
    plan = DayPlan(nodes=8_000, edges=100_000, communities=80) if args.quick else DayPlan()
    epochs = (4, 1) if args.quick else (args.scratch_epochs, args.epochs)
    work = WORK_DIR / ("retrain-days-quick" if args.quick else "retrain-days")
    meta = ensure_days(plan, work / "files")
    days = [work / "files" / f"day{d}.tsv" for d in range(plan.days + 1)]
    tests = {name: work / "files" / f"{name}.tsv" for name in TESTS}
    print(f"graph: {meta['day_edges']} edges per day, {meta['entities_after_day0']} entities after day 0", flush=True)
    scratch = scratch_regime(days, tests, work, epochs[0])
    incremental = incremental_regime(days, tests, work, epochs, dict(scratch["steps"][0]))
    rows, bars = summary_rows(scratch, incremental)
    headers = ["regime", "MRR", "Hits@10", "MRR new", "MRR last day", "untrained", "train cmds s", "training s",
               "cmds/scratch", "training/scratch", "edges/s"]  # fmt: skip
    print(format_table(headers, rows))
    print(json.dumps(bars, indent=2))
    payload = {"machine": machine_info(), "days": meta, "epochs": epochs, "scratch": scratch}
    path = write_json(
        "retrain_days" + ("_quick" if args.quick else ""), payload | {"incremental": incremental, "bars": bars}
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
