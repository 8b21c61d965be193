"""The tables bench/whole_run.py prints: the verdict per case, the wall-time breakdown, every wall time."""

from __future__ import annotations

from _common import format_table


def verdict(flag: bool | None) -> str:
    return "n/a" if flag is None else ("PASS" if flag else "FAIL")


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
