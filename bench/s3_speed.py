"""S3 vs local disk (issue 3): the same 2x2-partitioned training with all data on S3.

Both sides train the 2M-edge power-law graph of the speed benchmark (config A's model:
dimension 100, dot, ranking, 2 workers) on a 2x2 bucket grid with the same seed:

- ``local``: entity, edge and checkpoint paths in a local directory;
- ``s3``: the same data imported to a bucket of a local S3-compatible server (moto on
  127.0.0.1, the tests' launcher), every path ``s3://``; a fresh, empty read cache.

The figure is the wall time of ``pbg train`` (target: S3 at most 1.15x local), with the
time the stats rows attribute to partition IO, edge loading and bucket saves on each
side, so a regression shows where it comes from. Sides alternate ``--repeats`` times;
the medians are compared. Writes bench/results/s3_speed.json.

Run: ``.venv/bin/python -m bench.s3_speed [--epochs 3] [--repeats 1] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.lib import stats
from bench.lib.graphs.powerlaw import ensure_graph
from bench.lib.report import format_table, write_json
from bench.lib.runner import run_measured
from bench.lib.s3_server import S3Server, create_bucket
from bench.lib.tools import REPO_ROOT, TSV_COLUMNS, WORK_DIR, machine_info, ours_bin

TARGET_RATIO = 1.15


def config_dict(root: str, epochs: int) -> dict[str, Any]:
    """Config A's model on a 2x2 grid, every path under ``root`` (a directory or s3:// prefix)."""
    return {
        "entity_path": f"{root}/entities",
        "edge_paths": [f"{root}/edges"],
        "checkpoint_path": f"{root}/checkpoints",
        "entities": {"node": {"num_partitions": 2}},
        "relations": [{"name": "r0", "lhs": "node", "rhs": "node", "operator": "none"}],
        "dimension": 100,
        "global_emb": False,
        "comparator": "dot",
        "loss_fn": "ranking",
        "num_batch_negs": 50,
        "num_uniform_negs": 50,
        "batch_size": 1000,
        "workers": 2,
        "eval_fraction": 0.0,
        "num_epochs": epochs,
        "seed": 0,
    }


def stats_breakdown(checkpoint_url: str) -> dict[str, float]:
    """Seconds the stats rows attribute to training, partition IO, edge loading and saves."""
    rows = stats.bucket_rows(checkpoint_url)
    return {
        "train": stats.total_or_zero(rows, "timing", "train"),
        "partition_io": stats.total_or_zero(rows, "io", "seconds"),
        "load_edges": stats.total_or_zero(rows, "timing", "load_edges"),
        "save": stats.total_or_zero(rows, "timing", "save"),
        "buckets": len(rows),
    }


def run_side(name: str, config: dict[str, Any], work: Path, env: dict[str, str], attempt: int) -> dict[str, Any]:
    """Train from scratch once; wall time, peak memory and the stats breakdown."""
    side_dir = work / f"{name}-{attempt}"
    side_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = f"{config['checkpoint_path']}-{attempt}"
    path = side_dir / "config.json"
    path.write_text(json.dumps({**config, "checkpoint_path": checkpoint}, indent=2))
    result = run_measured([ours_bin(), "train", path], side_dir, "train", env=env)
    if not result.ok:
        raise RuntimeError(f"{name}: pbg train failed, see {result.stderr_path}")
    return {
        "wall_s": result.wall_s,
        "peak_rss_mib": result.peak_rss_bytes / 2**20,
        "breakdown": stats_breakdown(checkpoint),
    }


def import_both(roots: dict[str, str], tsv: Path, work: Path, env: dict[str, str], epochs: int) -> None:
    """``pbg import`` the graph into each side's root (local directory, S3 prefix)."""
    for name, root in roots.items():
        cfg = work / f"import-{name}.json"
        cfg.write_text(json.dumps(config_dict(root, epochs)))
        print(f"[{name}] importing {tsv.name} ...", flush=True)
        subprocess.run(
            [str(ours_bin()), "import", str(cfg), str(tsv), *TSV_COLUMNS],
            check=True,
            env={**os.environ, **env},
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
        )


def alternate_runs(
    roots: dict[str, str], work: Path, env: dict[str, str], epochs: int, repeats: int
) -> dict[str, list[dict[str, Any]]]:
    """``repeats`` training runs per side, the sides alternating, each with a cold read cache."""
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "s3": []}
    for attempt in range(repeats):
        for name, root in roots.items():
            cache = tempfile.mkdtemp(prefix=f"cache-{name}-", dir=work)  # cold read cache every run
            print(f"[{name}] pbg train, run {attempt + 1}/{repeats} ...", flush=True)
            runs[name].append(run_side(name, config_dict(root, epochs), work, {**env, "PBG_CACHE_DIR": cache}, attempt))
            print(f"[{name}] {runs[name][-1]['wall_s']:.1f} s", flush=True)
    return runs


def comparison_rows(
    runs: dict[str, list[dict[str, Any]]], median: dict[str, float], ratio: float, ok: bool
) -> list[list[object]]:
    """The table's rows: median walls and their ratio, the median time breakdown, peak RSS, the verdict."""
    rows: list[list[object]] = [
        [
            "pbg train wall s (median)",
            f"{median['local']:.1f}",
            f"{median['s3']:.1f}",
            f"{ratio:.3f} (<= {TARGET_RATIO})",
        ]
    ]
    for key in ("train", "partition_io", "load_edges", "save"):
        values = [statistics.median(r["breakdown"][key] for r in runs[n]) for n in ("local", "s3")]
        rows.append([f"  of which {key} s", f"{values[0]:.2f}", f"{values[1]:.2f}", ""])
    rows.append(
        [
            "peak tree RSS MiB",
            f"{runs['local'][0]['peak_rss_mib']:,.0f}",
            f"{runs['s3'][0]['peak_rss_mib']:,.0f}",
            "",
        ]
    )
    rows.append(["status", "", "", "PASS" if ok else "FAIL"])
    return rows


def main() -> int:
    """Parse flags, import the graph on both sides, alternate training runs, compare."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="200k edges instead of 2M")
    args = parser.parse_args()
    nodes, edges = (20_000, 200_000) if args.quick else (200_000, 2_000_000)
    work = WORK_DIR / "s3_speed"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # The speed benchmark's graph file (shared cache), generated if missing.
    tsv = WORK_DIR / "speed" / "graphs" / f"A-n{nodes}-e{edges}-r1-s0.tsv"
    tsv.parent.mkdir(parents=True, exist_ok=True)
    ensure_graph(tsv, nodes, edges, 1, 0)
    server = S3Server(log_path=work / "moto.log")
    server.start()
    try:
        env = {**server.env, "PREFECT_HOME": tempfile.mkdtemp(prefix="prefect-", dir=work)}
        os.environ.update(server.env)
        create_bucket(server.endpoint_url, "pbg-speed")
        roots = {"local": str(work / "local-data"), "s3": "s3://pbg-speed/data"}
        import_both(roots, tsv, work, env, args.epochs)
        runs = alternate_runs(roots, work, env, args.epochs, args.repeats)
        median = {name: statistics.median(r["wall_s"] for r in rs) for name, rs in runs.items()}
        ratio = median["s3"] / median["local"]
        ok = ratio <= TARGET_RATIO
        print(format_table(["metric", "local", "s3", "s3/local"], comparison_rows(runs, median, ratio, ok)))
        out = write_json(
            "s3_speed",
            {
                "machine": machine_info(),
                "args": vars(args),
                "edges": edges,
                "runs": runs,
                "median_wall_s": median,
                "ratio": ratio,
                "pass": ok,
            },
        )
        print(f"wrote {out}")
        return 0 if ok else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
