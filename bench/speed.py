"""Training speed and memory, PyPI PBG 1.0.0 vs our `pbg`, side by side in one run.

For each config (bench/configs/speed_a.py, speed_b.py, speed_c.py) on one seeded synthetic
graph (bench.lib.graphs.powerlaw, bench.lib.graphs.kg for C), each tool imports the TSV with its own
importer and trains from scratch with the same config file; the script then reports, per tool
and as ours/PBG ratios:
- train edges/s (each tool's own compute timer; see bench.lib.sides) and wall-clock edges/s;
- wall time of the train command, peak RSS and PSS of its whole process tree (see bench.lib.processes);
- achieved fraction of this machine's sgemm FLOP/s (bench.lib.flops model x edges/s / bench.sgemm).
Targets: config A ours/PBG >= 3x edges/s, B and C >= 2x, peak tree RSS ours <= PBG. Config C
also trains ours a second time with N3 (``-p regularization_coef=1e-3``, which PBG 1.0.0 lacks):
target N3 edges/s >= 0.9x ours without it.

Graphs: A = 200k nodes, 2M edges, 1 relation; B = 200k nodes, 200k edges, 10 relations
(dynamic); C = a KG of 110k entities, 22 Zipf-skewed relations, 257k edges (dynamic).
--quick shrinks all 10x (smoke run). Machines are shared and noisy: only compare numbers from
one run, and prefer the ratios.

Run: ``python -m bench.speed [--only A|B|C] [--epochs N] [--quick] [--skip-pbg] [--skip-ours]``;
writes bench/results/speed.json.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.lib.configs import load_config_dict
from bench.lib.flops import train_flops_per_edge
from bench.lib.graphs.kg import KGShape, ensure_kg
from bench.lib.graphs.powerlaw import ensure_graph
from bench.lib.report import format_table, ratio, write_json
from bench.lib.sides import SideCommands, build_sides, run_side, variant
from bench.lib.tools import BENCH_DIR, WORK_DIR, machine_info
from bench.sgemm import measure_machine


@dataclass(frozen=True)
class OursVariant:
    """A second run of our side with extra overrides, compared with our plain run."""

    name: str
    overrides: tuple[str, ...]
    min_ratio: float  # target: variant edges/s >= min_ratio x ours


@dataclass(frozen=True)
class SpeedCase:
    """One benchmark configuration: config file, graph shape, default epochs and target.

    ``kind`` picks the generator: "powerlaw" (gen_graph.py, ``nodes`` ids) or "kg" (gen_kg.py,
    ``nodes`` entities, a 1% test split written beside the train file and not imported).
    """

    name: str
    config_file: Path
    nodes: int
    edges: int
    relations: int
    epochs: int
    target_speedup: float
    kind: str = "powerlaw"
    variants: tuple[OursVariant, ...] = ()


N3 = OursVariant("ours_n3", ("regularization_coef=1e-3",), 0.9)
CASES = {
    "A": SpeedCase("A", BENCH_DIR / "configs" / "speed_a.py", 200_000, 2_000_000, 1, 3, 3.0),
    "B": SpeedCase("B", BENCH_DIR / "configs" / "speed_b.py", 200_000, 200_000, 10, 1, 2.0),
    "C": SpeedCase("C", BENCH_DIR / "configs" / "speed_c.py", 110_000, 257_000, 22, 3, 2.0, kind="kg", variants=(N3,)),
}
QUICK_SHRINK = 10


def ensure_case_graph(case: SpeedCase, shrink: int, seed: int) -> tuple[Path, dict[str, object]]:
    """Generate (or reuse) the case's graph, ``shrink`` times smaller; its path and summary."""
    nodes, edges = case.nodes // shrink, case.edges // shrink
    graphs = WORK_DIR / "speed" / "graphs"
    if case.kind == "kg":
        shape = KGShape(
            entities=nodes, relations=case.relations, train_edges=edges, test_edges=max(edges // 100, 1), seed=seed
        )
        path = graphs / f"{case.name}-kg-n{nodes}-e{edges}-r{case.relations}-s{seed}.tsv"
        return path, ensure_kg(path, shape)
    path = graphs / f"{case.name}-n{nodes}-e{edges}-r{case.relations}-s{seed}.tsv"
    return path, ensure_graph(path, nodes, edges, case.relations, seed)


def case_sides(case: SpeedCase, sides: list[SideCommands]) -> list[SideCommands]:
    """The tools' sides plus the case's variants of ours (when our side runs)."""
    ours = next((side for side in sides if side.tool == "ours"), None)
    extra = [variant(ours, v.name, list(v.overrides)) for v in case.variants] if ours else []
    return [*sides, *extra]


def add_flops(side: dict[str, object], flops_per_edge: float, sgemm: dict[str, object]) -> None:
    """Add achieved GFLOP/s and fractions of 1-thread and all-thread sgemm FLOP/s to ``side``."""
    rate = side.get("edges_per_s")
    if rate is None:
        return
    achieved = rate * flops_per_edge
    side["achieved_gflops"] = achieved / 1e9
    side["sgemm_fraction"] = achieved / sgemm["all_threads"]["flops"]
    side["sgemm_fraction_one_thread"] = achieved / sgemm["one_thread"]["flops"]


def _get(side: dict | None, key: str) -> float | None:
    """``side[key]`` of a side that ran to the end, else None."""
    return side.get(key) if side and side.get("status") == "ok" else None


def compare(case: SpeedCase, record: dict) -> dict[str, object]:
    """Ours/PBG ratios and pass/fail against the targets (None where a side is missing).

    Each variant of ours gets ``<name>_ratio`` (its edges/s over ours) and ``<name>_pass``.
    """
    pbg, ours = record.get("pbg"), record.get("ours")
    speedup = ratio(_get(ours, "edges_per_s"), _get(pbg, "edges_per_s"))
    rss_ratio = ratio(_get(ours, "peak_rss_mib"), _get(pbg, "peak_rss_mib"))
    result: dict[str, object] = {
        "speedup": speedup,
        "wall_speedup": ratio(_get(ours, "wall_edges_per_s"), _get(pbg, "wall_edges_per_s")),
        "rss_ratio": rss_ratio,
        "pss_ratio": ratio(_get(ours, "peak_pss_mib"), _get(pbg, "peak_pss_mib")),
        "target_speedup": case.target_speedup,
        "speed_pass": None if speedup is None else speedup >= case.target_speedup,
        "rss_pass": None if rss_ratio is None else rss_ratio <= 1.0,
    }
    for var in case.variants:
        var_ratio = ratio(_get(record.get(var.name), "edges_per_s"), _get(ours, "edges_per_s"))
        result[f"{var.name}_ratio"] = var_ratio
        result[f"{var.name}_min_ratio"] = var.min_ratio
        result[f"{var.name}_pass"] = None if var_ratio is None else var_ratio >= var.min_ratio
    return result


def run_case(case: SpeedCase, args: argparse.Namespace, sgemm: dict, sides: list) -> dict:
    """Generate the graph, run every side, compute FLOP fractions and ratios for one config."""
    shrink = QUICK_SHRINK if args.quick else 1
    epochs = args.epochs or (1 if args.quick else case.epochs)
    graph, summary = ensure_case_graph(case, shrink, args.seed)
    print(f"[{case.name}] graph {graph.name}", flush=True)
    flops_per_edge = train_flops_per_edge(load_config_dict(case.config_file))
    record: dict[str, object] = {
        "config_file": str(case.config_file),
        "epochs": epochs,
        "graph": {"path": str(graph), **summary},
        "train_flops_per_edge": flops_per_edge,
    }
    for side in case_sides(case, sides):
        extra = "".join(f" -p {o}" for o in side.train_overrides)
        print(f"[{case.name}] {side.name}: import + train ({epochs} epochs{extra}) ...", flush=True)
        workdir = WORK_DIR / "speed" / graph.stem / side.tool
        result = run_side(side, case.config_file, graph, workdir, epochs)
        add_flops(result, flops_per_edge, sgemm)
        record[side.name] = result
        print(
            f"[{case.name}] {side.name}: {result['status']}"
            + (f", {result['edges_per_s']:.0f} edges/s" if result.get("edges_per_s") else ""),
            flush=True,
        )
        if result["status"] != "ok":
            print(_failure_detail(result), flush=True)
    record["comparison"] = compare(case, record)
    return record


def _failure_detail(result: dict) -> str:
    """Where a failed side broke: the step's exit code and stderr tail, or its error note."""
    for step in ("train", "import"):
        run = result.get(step)
        if isinstance(run, dict) and "run" in run:
            run = run["run"]
        if isinstance(run, dict) and run.get("returncode"):
            return f"  {step} exited {run['returncode']}:\n{run.get('stderr_tail', '')}"
    return f"  {result.get('error', 'unknown failure')}"


def case_rows(case: SpeedCase, record: dict) -> list[list[object]]:
    """Table rows (metric, PBG, ours, ratio, target) for one config."""
    name = case.name
    pbg, ours, cmp = record.get("pbg") or {}, record.get("ours") or {}, record["comparison"]
    metrics = [
        ("train edges/s", "edges_per_s", cmp["speedup"], f">= {cmp['target_speedup']:g}x"),
        ("wall edges/s", "wall_edges_per_s", cmp["wall_speedup"], ""),
        ("train wall s", "train_wall_s", None, ""),
        ("peak tree RSS MiB", "peak_rss_mib", cmp["rss_ratio"], "<= 1"),
        ("peak tree PSS MiB", "peak_pss_mib", cmp["pss_ratio"], ""),
        ("achieved GFLOP/s", "achieved_gflops", None, ""),
        ("sgemm fraction", "sgemm_fraction", None, ""),
    ]
    rows = [[f"{name}: {label}", pbg.get(key), ours.get(key), r, target] for label, key, r, target in metrics]
    rows.append([f"{name}: status", pbg.get("status"), ours.get("status"), _verdict(cmp), ""])
    for var in case.variants:
        rows.extend(_variant_rows(name, var, record.get(var.name) or {}, cmp))
    return rows


def _variant_rows(name: str, var: OursVariant, side: dict, cmp: dict) -> list[list[object]]:
    """Rows for a variant of ours: its edges/s (ratio to ours) and compute-bound fraction."""
    label = f"{name}: {var.name} ({' '.join(var.overrides)})"
    verdict = cmp[f"{var.name}_pass"]
    return [
        [
            f"{label} train edges/s",
            None,
            side.get("edges_per_s"),
            cmp[f"{var.name}_ratio"],
            f">= {var.min_ratio:g}x ours",
        ],
        [f"{label} sgemm fraction", None, side.get("sgemm_fraction"), None, ""],
        [
            f"{label} status",
            None,
            side.get("status"),
            "n/a" if verdict is None else ("PASS" if verdict else "FAIL"),
            "",
        ],
    ]


def _verdict(cmp: dict) -> str:
    """PASS/FAIL text for the speed and RSS targets (n/a when a side did not run)."""

    def word(flag: bool | None) -> str:
        return "n/a" if flag is None else ("PASS" if flag else "FAIL")

    return f"speed {word(cmp['speed_pass'])}, rss {word(cmp['rss_pass'])}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="PBG 1.0.0 vs pbg-flow training speed.")
    parser.add_argument("--only", choices=sorted(CASES), help="run one config only")
    parser.add_argument("--epochs", type=int, help="override every config's epoch count")
    parser.add_argument("--quick", action="store_true", help="10x smaller graphs, 1 epoch")
    parser.add_argument("--skip-pbg", action="store_true", help="run our side only")
    parser.add_argument("--skip-ours", action="store_true", help="run PBG's side only")
    parser.add_argument("--seed", type=int, default=0, help="graph seed and our -p seed")
    parser.add_argument("--sgemm-size", type=int, default=2048)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sides, notes = build_sides(args.skip_pbg, args.skip_ours, args.seed)
    for note in notes:
        print(f"skipping a side: {note}")
    print("measuring sgemm ...", flush=True)
    sgemm = measure_machine(args.sgemm_size)
    names = [args.only] if args.only else sorted(CASES)
    records = {name: run_case(CASES[name], args, sgemm, sides) for name in names}
    rows = [row for name in names for row in case_rows(CASES[name], records[name])]
    print(format_table(["metric", "PBG 1.0.0", "ours", "ours/PBG", "target"], rows))
    print(
        f"sgemm: {sgemm['one_thread']['flops'] / 1e9:.1f} GFLOP/s on 1 thread, "
        f"{sgemm['all_threads']['flops'] / 1e9:.1f} on {sgemm['usable_cpus']} threads"
    )
    path = write_json(
        "speed", {"machine": machine_info(), "sgemm": sgemm, "notes": notes, "quick": args.quick, "configs": records}
    )
    print(f"wrote {path}")
    failed = [
        n
        for n, r in records.items()
        for s in ("pbg", "ours", *(v.name for v in CASES[n].variants))
        if s in r and r[s]["status"] != "ok"
    ]
    return 1 if failed or not sides else 0


if __name__ == "__main__":
    sys.exit(main())
