"""One machine vs two Dask workers on one planted graph: link-prediction parity, then scaling.

One seeded graph with planted communities (bench/lj_graph.py: directed Chung-Lu, power-law
degrees, communities of ``--community-size`` nodes holding all but a ``--mix`` share of the
edges, no self-loops or duplicates): 400k nodes, 8.0M training edges and a 1% held-out test
split (80.8k edges), imported once with ``pbg import`` into 4 partitions of one entity type (a
4x4 bucket grid of about 500k edges per bucket, so that a bucket's hand-out and recording do not
dominate its compute). Everything lives under bench/work/distributed/<graph tag>/ (graph and
import cached by their parameters and a marker).

1. **Quality parity**: the same config (d=100, dot comparator, softmax loss, lr 0.1, one relation
   with operator ``--operator``, default ``diagonal``, so that every bucket changes parameters
   the machines share, 50 batch + 50 uniform negatives, ``eval_fraction`` 0, 3 epochs) trained
   from scratch per seed with ``num_machines`` 1 (``workers`` unset: all usable cores), 2 (a
   local Dask cluster the flow starts; each machine ``cores // 2`` HOGWILD trainers) and 2 with
   ``distributed_shared_merge: average`` instead of the default delta, then ``pbg eval
   --filtered`` of the test split with ``all_negs`` (every entity of the true entity's
   partition is a candidate, as PBG ranks; train and test edges filtered). Bar: |mean MRR of 2
   machines (delta) - mean MRR of 1 machine| <= 0.01; average - delta is reported beside it. A
   finished seed's record is kept in its run directory and reused by a later invocation with the
   same commands (``--rerun`` trains again): the quality part is resumable.
2. **Scaling**: ``workers: 1`` everywhere, seed 0, never cached; ``--repeats`` rounds, each of
   1 machine, then 2 machines, then (unless ``--skip-ceiling``) the **ceiling pair**: two
   1-machine trainings with the same config and seed started at the same moment (one quiet wait
   before both), each into its own run directory and on its own new PREFECT_HOME (two commands
   starting together on one new PREFECT_HOME both run Prefect's database migrations). Each
   such home is a copy of one template home on which ``prefect server database upgrade`` ran
   once, unmeasured, before the first round: a new home's migrations would otherwise land in
   the pair's wall times and not in the 1-machine run's. Per run, from the stats rows:
   ``train_edges_per_s`` = sum of ``stats.count`` / sum of ``timing.train`` (one trainer's rate
   inside its buckets), ``aggregate_train_edges_per_s`` = the same edges / (that sum /
   ``num_machines``) (all machines' in-bucket rate together), and ``whole_run_edges_per_s`` =
   the same edges / the whole ``pbg train`` command's wall time (start-up and shutdown
   included). Figures, per round and (in the summary) from the medians over rounds:
   - ``aggregate_train_rate_ratio``: 2 machines' aggregate rate / 1 machine's (= (edges /
     (sum of timing.train / 2)) / (edges / sum of timing.train)). **The bar is on this one:
     >= 1.7x**, from the medians over rounds of each setting's rate (``passed``);
   - ``whole_run_speedup``: the ratio of the whole-run rates; ``per_bucket_rate_ratio``: the
     ratio of the one-trainer rates (both reported beside the bar, as ratios of the medians);
   - ``ceiling_per_trainer_ratio``: the pair's mean ``train_edges_per_s`` / that of the round's
     1-machine run alone: how much two trainers slow each other on this machine's cores with no
     Dask and no shared state (the hardware ceiling for a machine's rate);
   - ``ceiling_throughput_ratio``: (the pair's edges together, 2 x one run's, over the wall of
     the slower of the pair) / (edges / wall of the round's 1-machine run): what two fully
     independent jobs reach end to end. The summary's two ceiling figures are medians of the rounds' ratios.
   Per epoch, bytes read and written (sum of ``io.bytes_read`` / ``io.bytes_written`` over the
   epoch's bucket rows) against the minimum: every partition's embeddings and Adagrad state
   (rows x (dimension + 1) x 4 bytes) read once and written once; the report prints, per kind
   of run (quality and scaling 1 and 2 machines, ceiling pair), the median bytes read and
   written per epoch as multiples of that minimum. The committed partition files' sizes are
   recorded beside it.
3. For every run: the mean of each ``timing`` field over the bucket rows, the bucket time (the
   sum of a row's timing fields) per machine, the **gap**: wall time minus the sum of all bucket
   times divided by ``num_machines`` (what is not inside a bucket on an average machine:
   start-up, cluster start, machine build, bucket hand-out and recording, idle machines,
   checkpoint commits, shutdown), and the wall time cut at the log lines
   (cluster_scaling_rows.log_phases).

Every command runs through bench/_common.run_measured (wall time spawn -> exit, peak RSS of the
process tree, logs next to the run) with one temporary PREFECT_HOME for the whole script (the
ceiling pair excepted, see 2.; ``PREFECT_API_URL`` dropped: ``pbg`` uses its embedded server, as
by default); an unmeasured one-epoch warm-up on 2 machines trains before the first measured run.
The machine is shared: before each command (each ceiling pair) the script waits
(``--quiet-wait``, default at most 300 s) for it to be idle over 2 x 3 s, and records the CPU
seconds other people's processes took during the command (during the pair, from the first spawn
to the last exit).

Modules: cluster_scaling_runs (set-up, configs, measured commands, one training's record),
cluster_scaling_parts (the quality and scaling parts, the ceiling pair, the figures),
cluster_scaling_rows (stats rows, log phases, partition files), cluster_scaling_report (the tables).

Run: ``python bench/cluster_scaling.py [--quick] [--skip-quality] [--skip-scaling] [--skip-ceiling]
[--seeds 0,1,2] [--epochs 3] [--dimension 100] [--repeats 2] [--rerun] [--quiet-wait 300]
[--lock PATH]``. Writes bench/results/cluster_scaling.json (``--quick``: cluster_scaling_quick.json;
20k nodes, 202k train edges, 1 seed, 2 epochs, 1 round). Exit status 1 if a command failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lj_graph
from _common import ToolMissingError, machine_info, ours_bin, write_json
from cluster_scaling_parts import SETTINGS, cached_quality, run_quality, run_scaling
from cluster_scaling_report import all_runs, print_report
from cluster_scaling_runs import (
    QUIET,
    WORK,
    Setup,
    entity_counts,
    graph_params,
    import_graph,
    warm_up,
    write_configs,
)

# Full: 7,999,200 train and 80,800 test edges (1%), buckets of about 500k edges: long enough
# (about 1.5 s for one trainer at d=100) that a bucket's hand-out and recording do not dominate.
FULL = {"nodes": 400_000, "edges": 8_080_000, "repeats": 2}
QUICK = {"nodes": 20_000, "edges": 204_000, "repeats": 1}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200k edges, 1 seed, 2 epochs: a smoke run")
    parser.add_argument("--skip-quality", action="store_true", help="no quality-parity part")
    parser.add_argument("--skip-scaling", action="store_true", help="no scaling part")
    parser.add_argument(
        "--skip-ceiling", action="store_true", help="no ceiling pair (two 1-machine runs at once) in the scaling rounds"
    )
    parser.add_argument("--seeds", help="comma-separated training seeds (default 0,1,2; --quick: 0)")
    parser.add_argument("--epochs", type=int, help="num_epochs of every run (default 3; --quick: 2)")
    parser.add_argument("--dimension", type=int, default=100, help="embedding dimension")
    parser.add_argument(
        "--operator", default="diagonal", help="the relation's operator (default diagonal: shared parameters to merge)"
    )
    parser.add_argument("--lr", type=float, default=0.1, help="Adagrad learning rate")
    parser.add_argument("--nodes", type=int, help="graph nodes (default 400k; --quick: 20k)")
    parser.add_argument("--edges", type=int, help="distinct edges, test split included (default 8.08M; --quick: 204k)")
    parser.add_argument("--test-fraction", type=float, default=0.01, help="share of edges held out for eval")
    parser.add_argument("--community-size", type=int, default=100, help="nodes per planted community")
    parser.add_argument("--mix", type=float, default=0.3, help="share of edges whose target ignores communities")
    parser.add_argument("--graph-seed", type=int, default=0, help="seed of the graph")
    parser.add_argument(
        "--repeats",
        type=int,
        help="scaling rounds, 1 then 2 machines then the ceiling pair each (default 2; --quick: 1)",
    )
    parser.add_argument("--rerun", action="store_true", help="train the quality seeds again even if recorded")
    parser.add_argument("--lock", type=Path, help="flock this file around every measured command")
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=300.0,
        help="before each measured command wait up to this many s for the machine to be idle (0: never)",
    )
    args = parser.parse_args(argv)
    size = QUICK if args.quick else FULL
    args.nodes = args.nodes or size["nodes"]
    args.edges = args.edges or size["edges"]
    args.repeats = args.repeats or size["repeats"]
    args.epochs = args.epochs or (2 if args.quick else 3)
    args.seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1,2")).split(",") if s]
    if args.skip_quality and args.skip_scaling:
        parser.error("--skip-quality and --skip-scaling: nothing to run")
    return args


def setup_of(args: argparse.Namespace) -> Setup:
    return Setup(
        nodes=args.nodes,
        edges=args.edges,
        test_fraction=args.test_fraction,
        community_size=args.community_size,
        mix=args.mix,
        alpha=0.5,
        graph_seed=args.graph_seed,
        dimension=args.dimension,
        epochs=args.epochs,
        lr=args.lr,
        batch_size=1000,
        num_batch_negs=50,
        num_uniform_negs=50,
        operator=args.operator,
    )


def run_parts(
    payload: dict[str, Any],
    base: Path,
    setup: Setup,
    configs: tuple[Path, Path],
    args: argparse.Namespace,
    env: dict[str, str],
) -> bool:
    """Import, warm-up, the quality and scaling parts, each into ``payload``; True if a command failed."""
    import_config, config = configs
    payload["import"] = imported = import_graph(base, payload["graph"], import_config, env, args.lock)
    if not imported.get("cached") and not imported.get("ok"):
        return True
    counts = entity_counts(base)
    minimum = sum(counts) * (setup.dimension + 1) * 4
    payload.update(partition_rows=counts, minimum_bytes_per_epoch=minimum)
    quality_to_train = not args.skip_quality and any(
        cached_quality(base, config, s, seed, args)[1] is None for seed in args.seeds for s in SETTINGS
    )
    if quality_to_train or not args.skip_scaling:
        payload["warm_up"] = warm_up(base, config, env, args.lock)
    if not args.skip_quality:
        payload["quality"] = run_quality(base, config, minimum, args, env)
    if not args.skip_scaling:
        payload["scaling"] = run_scaling(base, config, minimum, args, env)
    return any(not r.get("ok") or (r.get("eval") and not r["eval"].get("ok")) for r in all_runs(payload))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        ours_bin()
    except ToolMissingError as error:
        print(f"cluster_scaling: error: {error}", file=sys.stderr)
        return 1
    QUIET["max_wait_s"] = args.quiet_wait
    setup = setup_of(args)
    params = graph_params(setup)
    base = WORK / params.tag()
    started = time.perf_counter()
    graph = lj_graph.ensure_graph(params, base / "graph")
    graph["seconds"] = time.perf_counter() - started
    print(f"graph: {json.dumps(graph['summary'])} ({'cached' if graph['cached'] else 'written'})", flush=True)
    import_config, config = write_configs(base, setup)
    os.environ.pop("PREFECT_API_URL", None)  # the embedded server, as `pbg train` by default
    prefect_home = tempfile.mkdtemp(prefix="pbg-distributed-prefect-")
    env = {"PREFECT_HOME": prefect_home}
    payload: dict[str, Any] = {
        "machine": machine_info(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "setup": asdict(setup),
        "graph_params": asdict(params),
        "graph": graph,
        "config": json.loads(config.read_text()),
        "workdir": str(base),
    }
    try:
        failed = run_parts(payload, base, setup, (import_config, config), args, env)
    finally:
        shutil.rmtree(prefect_home, ignore_errors=True)
    if "minimum_bytes_per_epoch" in payload:
        print_report(payload)
    path = write_json("cluster_scaling_quick" if args.quick else "cluster_scaling", payload)
    print(f"wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
