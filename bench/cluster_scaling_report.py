"""The tables bench/cluster_scaling.py prints from its payload (the JSON it writes).

The graph and model; quality parity (MRR per seed and setting, the verdict); scaling (every run's
rates, bytes per epoch and gap, the figures per round, their medians, which figure the bar is on
and the verdict); bytes read and written per epoch per kind of run as multiples of the minimum;
per bucket the mean of each timing field; each run's wall time cut at its log lines.
"""

from __future__ import annotations

import os
import re
import statistics
from typing import Any

from _common import format_table, mib, ratio
from cluster_scaling_parts import BAR_FIGURE, MRR_BAR, SPEEDUP_BAR
from cluster_scaling_runs import PARTITIONS

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
