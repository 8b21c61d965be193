"""Single-threaded training throughput of one HOGWILD worker (``train_edges``), no I/O.

Config A: one entity type, one relation, operator none, dot, ranking, dim 100,
num_batch_negs 50, num_uniform_negs 50, batch 1000 (takes pbg_core.training.fast_paths; target
>= 330k edges/s per worker in the dense regime, ``--sparse-max-density -1``).
Config B: complex_diagonal, dim 400, softmax, 1000 uniform + 50 batch negatives,
10 dynamic relations (target >= 1.4k edges/s).

Each config trains ``--passes`` passes over the same edges and reports every pass:
with the ranking loss later passes have far fewer violators, so they measure the
sparse backward of :mod:`pbg_core.training.fast_backward` (``--sparse-max-density`` overrides
its threshold: -1 forces the dense backward, 1 the sparse one). CPU-time rates are the
ones to compare when the machine is shared.

Run: ``.venv/bin/python -m bench.micro_train_step [--edges 50000] [--passes 3] [--configs A]``.
"""

from __future__ import annotations

import argparse
import resource
import time
from types import SimpleNamespace

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.model.embedder import build_model
from pbg_core.session.build import worker_settings
from pbg_core.training import fast_backward
from pbg_core.training.batching import train_edges
from pbg_core.training.settings import build_trainer
from pbg_core.training.tables import BucketTables
from pbg_core.types import Side

COUNT = 200_000


def make_config(name: str) -> SimpleNamespace:
    """The two benchmark configs as attribute bags (ConfigSchema field names)."""
    common = dict(
        entities={"all": SimpleNamespace(num_partitions=1, featurized=False, dimension=None)},
        bias=False,
        margin=0.1,
        regularizer="N3",
        max_norm=None,
        init_scale=1e-3,
        operator_init="identity",
        batch_size=1000,
        disable_lhs_negs=False,
        disable_rhs_negs=False,
        lr=0.1,
        relation_lr=None,
        eval_num_batch_negs=1000,
        eval_num_uniform_negs=1000,
        seed=0,
    )
    if name == "A":
        cfg = SimpleNamespace(
            relations=[SimpleNamespace(name="r", lhs="all", rhs="all", weight=1.0, operator="none", all_negs=False)],
            dimension=100,
            comparator="dot",
            loss_fn="ranking",
            regularization_coef=0.0,
            global_emb=False,
            dynamic_relations=False,
            num_batch_negs=50,
            num_uniform_negs=50,
            **common,
        )
    else:
        cfg = SimpleNamespace(
            relations=[
                SimpleNamespace(name="r", lhs="all", rhs="all", weight=1.0, operator="complex_diagonal", all_negs=False)
            ],
            dimension=400,
            comparator="dot",
            loss_fn="softmax",
            regularization_coef=1e-3,
            global_emb=False,
            dynamic_relations=True,
            num_batch_negs=50,
            num_uniform_negs=1000,
            **common,
        )
    cfg.entity_dimension = lambda entity: cfg.dimension
    return cfg


def run(name: str, num_edges: int, passes: int) -> list[float]:
    """CPU-time edges/s of each of ``passes`` passes of ``train_edges`` over the same random edges."""
    torch.manual_seed(0)
    cfg = make_config(name)
    num_rels = 10 if cfg.dynamic_relations else 1
    model = build_model(cfg, num_rels)
    trainer = build_trainer(worker_settings(cfg), model)
    table = torch.randn(COUNT, cfg.dimension) * 1e-3
    state = torch.zeros(COUNT)
    tables = BucketTables(
        {("all", Side.LHS): table, ("all", Side.RHS): table}, {("all", Side.LHS): state, ("all", Side.RHS): state}
    )
    gen = torch.Generator().manual_seed(0)
    edges = EdgeList.from_tensors(
        torch.randint(COUNT, (num_edges,), generator=gen),
        torch.randint(COUNT, (num_edges,), generator=gen),
        torch.randint(num_rels, (num_edges,), generator=gen),
    )
    indices = torch.arange(num_edges)
    train_edges(trainer, tables, edges, indices[:2000], gen)  # warm-up
    cpu_rates = []
    for number in range(1, passes + 1):
        started, cpu_started = time.perf_counter(), time.process_time()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        stats = train_edges(trainer, tables, edges, indices, gen)
        # Page faults per batch: fresh big temporaries every batch showed up here (~850).
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) * cfg.batch_size / num_edges
        rate = num_edges / (time.perf_counter() - started)
        # CPU time of this process: on a shared, loaded machine wall time overstates cost.
        cpu_rate = num_edges / max(time.process_time() - cpu_started, 1e-9)
        cpu_rates.append(cpu_rate)
        rates = f"{rate:,.0f} edges/s wall, {cpu_rate:,.0f} edges/s cpu, {faults:.1f} page faults/batch"
        print(f"config {name} pass {number}: {rates}  ({stats.format()})")
    return cpu_rates


def main() -> None:
    """Parse flags, run the configs single-threaded, print the per-pass CPU rates."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--edges", type=int, default=50_000)
    parser.add_argument("--passes", "--repeats", type=int, default=3, help="passes over the same edges")
    parser.add_argument("--sparse-max-density", type=float, default=None, help="override the sparse threshold")
    parser.add_argument("--configs", default="AB")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.sparse_max_density is not None:
        fast_backward.SPARSE_MAX_DENSITY = args.sparse_max_density
    for name in args.configs:
        edges = args.edges if name == "A" else min(args.edges, 10_000)
        rates = run(name, edges, args.passes)
        per_pass = ", ".join(f"{r:,.0f}" for r in rates)
        print(f"config {name}: cpu edges/s per pass [{per_pass}], best {max(rates):,.0f} (single-threaded worker)")


if __name__ == "__main__":
    main()
