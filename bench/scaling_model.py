"""Predicted epoch time of a distributed run on 1-64 machines, from measured per-bucket costs.

The schedule is simulated with the lock server the ``pbg`` flow runs
(:class:`pbg_core.distributed.bucket_locks.BucketLocks`: locks, cost rule, tree initialisation
off after the first pass), one entity type on both sides of P partitions (P x P buckets). A
machine's bucket takes

    compute  = edges of the bucket / (cores x edges/s per trainer x HOGWILD efficiency)
    reads    = the bucket's partitions it does not hold from its previous bucket / read MB/s
    writes   = the bucket's partitions (saved after every bucket) / write MB/s
    overhead = the coordinator's per-bucket orchestration (tasks, record), serial in the flow

and the coordinator records one bucket at a time (its overhead cannot overlap itself). Every
input is a measurement of this project on this machine (bench/cluster_scaling.py, bench/speed.py,
bench/s3_speed.py) or a stated assumption (cores per machine, storage bandwidth); the defaults
are the figures docs/scaling.md quotes. Writes bench/results/scaling_model.json.

    .venv/bin/python bench/scaling_model.py [--edge-rate 30000] [--cores 32] [--read-mbps 500] ...
"""

from __future__ import annotations

import argparse
import heapq
import sys
from dataclasses import dataclass

from _common import format_table, write_json

from pbg_core.distributed.bucket_locks import BucketLocks
from pbg_core.types import Bucket

TWITTER_NODES = 41_652_230
TWITTER_EDGES = 1_468_365_182


@dataclass(frozen=True)
class Costs:
    """Per-bucket cost inputs (see the module docstring)."""

    edge_rate: float  # edges/s of one trainer (one core) at this dimension
    cores: int  # trainers per machine
    hogwild_efficiency: float  # measured rate of `cores` trainers / (cores x one trainer's)
    read_mbps: float
    write_mbps: float
    overhead_s: float  # coordinator time per bucket (serial)
    partition_bytes: float
    edges_per_bucket: float

    def compute_s(self) -> float:
        return self.edges_per_bucket / (self.cores * self.edge_rate * self.hogwild_efficiency)


def simulate(partitions: int, machines: int, costs: Costs, tree_init: bool) -> dict[str, float]:
    """One epoch's schedule: (seconds, busy fraction of the machines, partitions read and written)."""
    buckets = [Bucket(lhs, rhs) for lhs in range(partitions) for rhs in range(partitions)]

    def sides(bucket: Bucket) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        return [("node", bucket.lhs)], [("node", bucket.rhs)]

    locks = BucketLocks(buckets, sides, {"node": 1.0}, tree_init=tree_init)
    held: dict[str, set[tuple[str, int]]] = {}
    events: list[tuple[float, int, str]] = []  # (finish time, tie-break, machine)
    free = [f"m{i}" for i in range(machines)]
    now, coordinator_free, busy, reads, writes, order = 0.0, 0.0, 0.0, 0, 0, 0
    while locks.remaining:
        for machine in list(free):
            bucket = locks.acquire(machine)
            if bucket is None:
                continue
            keys = {("node", bucket.lhs), ("node", bucket.rhs)}
            fresh = keys - held.get(machine, set())
            seconds = (
                costs.compute_s()
                + len(fresh) * costs.partition_bytes / (costs.read_mbps * 1e6)
                + len(keys) * costs.partition_bytes / (costs.write_mbps * 1e6)
            )
            reads, writes = reads + len(fresh), writes + len(keys)
            held[machine] = keys
            busy += seconds
            free.remove(machine)
            order += 1
            heapq.heappush(events, (now + seconds, order, machine))
        finish, _, machine = heapq.heappop(events)
        # The coordinator records buckets one at a time; the machine waits for its record.
        coordinator_free = max(coordinator_free, finish) + costs.overhead_s
        now = coordinator_free
        locks.release(machine)
        free.append(machine)
    return {"seconds": now, "utilisation": busy / (now * machines), "reads": reads, "writes": writes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=TWITTER_NODES)
    parser.add_argument("--edges", type=int, default=TWITTER_EDGES)
    parser.add_argument("--dimension", type=int, default=100)
    parser.add_argument("--edge-rate", type=float, required=True, help="edges/s of one trainer at this dimension")
    parser.add_argument("--hogwild-efficiency", type=float, required=True, help="measured, many trainers vs one")
    parser.add_argument("--cores", type=int, default=32, help="trainers per machine (assumed)")
    parser.add_argument("--read-mbps", type=float, required=True)
    parser.add_argument("--write-mbps", type=float, required=True)
    parser.add_argument("--overhead-s", type=float, required=True, help="coordinator seconds per bucket")
    parser.add_argument("--partitions", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--machines", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    args = parser.parse_args(argv)
    rows, results = [], []
    for partitions in args.partitions:
        costs = Costs(
            edge_rate=args.edge_rate,
            cores=args.cores,
            hogwild_efficiency=args.hogwild_efficiency,
            read_mbps=args.read_mbps,
            write_mbps=args.write_mbps,
            overhead_s=args.overhead_s,
            partition_bytes=args.nodes / partitions * (args.dimension * 4 + 4),
            edges_per_bucket=args.edges / partitions**2,
        )
        single = None
        for machines in args.machines:
            epoch = simulate(partitions, machines, costs, tree_init=False)
            single = single or epoch["seconds"]
            result = {"partitions": partitions, "machines": machines, **epoch, "speedup": single / epoch["seconds"]}
            results.append(result)
            rows.append(
                [
                    partitions,
                    machines,
                    round(epoch["seconds"] / 60, 1),
                    round(single / epoch["seconds"], 2),
                    f"{epoch['utilisation']:.0%}",
                    round(costs.compute_s(), 1),
                    round(costs.partition_bytes / 1e9, 2),
                ]
            )
    print(format_table(["P", "machines", "epoch min", "speedup", "busy", "compute s/bucket", "GB/partition"], rows))
    path = write_json("scaling_model", {"inputs": vars(args), "results": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
