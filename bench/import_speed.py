"""Import speed and memory: our `pbg import` vs PyPI PBG 1.0.0's `torchbiggraph_import_from_tsv`.

The graph (cached under bench/work/): 10M edges, string ids ``n<k>`` (about 1M distinct
entities, power-law degrees, bench.lib.graphs.powerlaw), 10 relations ``r0..r9``, one entity type in
2 partitions (2x2 buckets). Runs, each in a fresh directory with the same PBG ``.py`` config:

- ours on the full 10M-edge file, three times (the median is reported: shared machines are noisy);
- ours on the file twice over (20M edges, exactly the same entities): peak memory must not grow;
- ours on a 2M-edge slice (the file's first 2M lines) and PBG on the same slice: PBG's
  importer is single-threaded Python holding everything in memory, so its full 10M run is
  too slow to be worth running here; the like-for-like ratio is on the slice.

Each command is measured by bench.lib.runner.run_measured (wall time including interpreter start,
peak RSS/PSS of the process tree). Bars: ours >= 1M edges/s on 10M edges (median run), >= 15x PBG
on the slice, and peak RSS on 20M edges at most 1.10x that on 10M (memory must not grow with
the number of edges).

Run: ``python -m bench.import_speed [--skip-pbg] [--edges N] [--slice N] [--repeat K]``; writes
bench/results/import_speed.json.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from bench.lib.graphs.powerlaw import ensure_graph
from bench.lib.report import format_table, mib, ratio, write_json
from bench.lib.runner import run_measured
from bench.lib.tools import TSV_COLUMNS, WORK_DIR, machine_info, ours_bin, pbg_bin

NODES, RELATIONS, SEED = 1_000_000, 10, 0
CASE_DIR = WORK_DIR / "import_speed"
RSS_GROWTH_BAR = 1.10  # peak RSS on twice the edges over the same entities

CONFIG = '''"""Import benchmark config (bench.import_speed): PBG format, relative paths."""


def get_torchbiggraph_config():
    return {
        "entity_path": "entities",
        "edge_paths": ["edges"],
        "checkpoint_path": "checkpoints",
        "entities": {"node": {"num_partitions": 2}},
        "relations": [{"name": f"r%d" % i, "lhs": "node", "rhs": "node", "operator": "none"} for i in range(10)],
        "dimension": 16,
    }
'''


def ensure_slice(source: Path, lines: int) -> Path:
    """The first ``lines`` lines of ``source`` (cached next to it)."""
    target = source.with_name(f"{source.stem}_first{lines}.tsv")
    if target.exists() and sum(1 for _ in target.open("rb")) == lines:
        return target
    tmp = target.with_name(target.name + ".tmp")
    with source.open("rb") as src, tmp.open("wb") as out:
        for i, line in enumerate(src):
            if i == lines:
                break
            out.write(line)
    tmp.replace(target)
    return target


def run_tool(tool: str, tsv: Path, edges: int) -> dict[str, object]:
    """Import ``tsv`` with ``tool`` ("ours" | "pbg") in a fresh directory; the measured record."""
    cwd = CASE_DIR / f"{tool}_{edges}"
    shutil.rmtree(cwd, ignore_errors=True)  # PBG skips the import when its outputs exist
    cwd.mkdir(parents=True)
    (cwd / "config.py").write_text(CONFIG)
    if tool == "ours":
        argv = [
            ours_bin(),
            "import",
            "config.py",
            str(tsv),
            *TSV_COLUMNS,
            "--delimiter",
            "\t",
            "-p",
            f"seed={SEED}",
        ]
    else:
        argv = [
            pbg_bin("torchbiggraph_import_from_tsv"),
            *TSV_COLUMNS,
            "config.py",
            str(tsv),
        ]
    result = run_measured(argv, cwd, "import")
    if not result.ok:
        print(f"{tool} failed ({result.returncode}):\n{result.stderr[-2000:]}", file=sys.stderr)
    record = result.summary()
    record.update(tool=tool, edges=edges, edges_per_s=edges / result.wall_s if result.ok else None)
    return record


def ensure_doubled(source: Path) -> Path:
    """``source`` twice in a row (cached): twice the edges over exactly the same entities."""
    target = source.with_name(f"{source.stem}_x2.tsv")
    if target.exists() and target.stat().st_size == 2 * source.stat().st_size:
        return target
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("wb") as out:
        for _ in range(2):
            with source.open("rb") as src:
                shutil.copyfileobj(src, out, 16 << 20)
    tmp.replace(target)
    return target


def median_run(tsv: Path, edges: int, repeat: int) -> dict[str, object]:
    """Our import of ``tsv`` ``repeat`` times; the run of median wall time, with every wall time."""
    runs = [run_tool("ours", tsv, edges) for _ in range(repeat)]
    chosen = sorted(runs, key=lambda r: float(r["wall_s"]))[len(runs) // 2]
    return {**chosen, "wall_s_all": [r["wall_s"] for r in runs]}


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", type=int, default=10_000_000, help="edges of the full graph")
    parser.add_argument("--slice", type=int, default=2_000_000, help="edges of the slice PBG imports")
    parser.add_argument("--repeat", type=int, default=3, help="runs of ours on the full graph (median reported)")
    parser.add_argument("--skip-pbg", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Import the full graph, the doubled one and the slice with ours (the slice with PBG too); compare."""
    args = parse_args(argv)
    full = WORK_DIR / ("import_10m.tsv" if args.edges == 10_000_000 else f"import_{args.edges}.tsv")
    summary = ensure_graph(full, NODES, args.edges, RELATIONS, SEED)
    part, doubled = ensure_slice(full, args.slice), ensure_doubled(full)
    ours_full = median_run(full, args.edges, args.repeat)
    ours_doubled = run_tool("ours", doubled, 2 * args.edges)
    ours_part = run_tool("ours", part, args.slice)
    pbg_part = None if args.skip_pbg else run_tool("pbg", part, args.slice)
    runs = [r for r in (ours_full, ours_doubled, ours_part, pbg_part) if r is not None]
    rows = [
        [
            r["tool"],
            f"{r['edges']:,}",
            r["wall_s"],
            r["edges_per_s"],
            mib(r["peak_rss_bytes"]),
            mib(r["peak_pss_bytes"]),
        ]
        for r in runs
    ]
    print(f"graph: {summary}")
    print(
        f"ours on {args.edges:,} edges: median of {args.repeat} runs, wall s {ours_full['wall_s_all']}; "
        f"{2 * args.edges:,} edges: the same file twice (same entities)"
    )
    print(format_table(["tool", "edges", "wall s", "edges/s", "peak RSS MiB", "peak PSS MiB"], rows))
    speedup = ratio(ours_part["edges_per_s"], pbg_part["edges_per_s"]) if pbg_part else None
    rss_growth = ratio(ours_doubled["peak_rss_bytes"], ours_full["peak_rss_bytes"])
    rate = ours_full["edges_per_s"] or 0
    print(f"PBG ran on the {args.slice:,}-edge slice only (its full {args.edges:,}-edge run is too slow here).")
    print(f"ours on {args.edges:,}: {rate:,.0f} edges/s (bar >= 1,000,000): {verdict(rate >= 1_000_000)}")
    print(
        f"ours/PBG on the slice: {speedup and f'{speedup:.1f}x'} (bar >= 15x): "
        f"{verdict(None if speedup is None else speedup >= 15)}"
    )
    print(
        f"peak RSS {2 * args.edges:,} / {args.edges:,} edges: {rss_growth and f'{rss_growth:.2f}'} "
        f"(bar <= {RSS_GROWTH_BAR}, memory must not grow with edges): "
        f"{verdict(None if rss_growth is None else rss_growth <= RSS_GROWTH_BAR)}"
    )
    path = write_json(
        "import_speed",
        {
            "machine": machine_info(),
            "graph": summary,
            "slice_edges": args.slice,
            "note": f"PBG runs on the first {args.slice} lines only: its full run is too slow; "
            f"the {2 * args.edges}-edge input is the full file twice",
            "runs": runs,
            "ours_over_pbg_on_slice": speedup,
            "ours_edges_per_s_full": ours_full["edges_per_s"],
            "peak_rss_doubled_over_full": rss_growth,
            "bars": {"edges_per_s_full": 1_000_000, "ours_over_pbg": 15, "peak_rss_doubled_over_full": RSS_GROWTH_BAR},
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
