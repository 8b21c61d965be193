"""Predicted epoch time of a distributed run on 1-64 machines, from measured per-bucket costs.

The schedule is simulated with the lock server the ``pbg`` flow runs
(:class:`pbg_core.distributed.bucket_locks.BucketLocks`: locks, cost rule, tree initialisation
off after the first pass), one entity type on both sides of P partitions (P x P buckets). A
machine's bucket takes

    compute   = edges of the bucket / (cores x edges/s per trainer x HOGWILD efficiency)
    transfers = partitions read and written for it x partition bytes / storage MB/s
    overhead  = the coordinator's per-bucket orchestration (tasks, record), serial in the flow

and the coordinator records one bucket at a time (its overhead cannot overlap itself). A
machine reads a partition it does not hold, or holds in a version another machine has trained
since. Two save policies (:class:`Storage`):

- ``every-bucket`` (pbg-flow): both partitions are saved after every bucket: what makes a
  bucket durable the moment it is recorded (a lost machine costs at most its one bucket);
- ``on-eviction`` (PBG with ``num_partition_servers: 0``): a machine saves a partition only when
  it moves on to a bucket without it, when another machine needs it, and at the end of the pass.

Every input is a measurement of this project on this machine (bench.cluster_scaling) or a
stated assumption (cores per machine, storage bandwidth); the defaults are the figures
docs/scaling.md quotes. Writes bench/results/scaling_model.json.

    .venv/bin/python -m bench.scaling_model [--edge-rate 315000] [--cores 32] [--storage-mbps 200 1250] ...
"""

from __future__ import annotations

import argparse
import heapq
import sys
from dataclasses import dataclass, field

from bench.lib.report import format_table, write_json
from pbg_core.distributed.bucket_locks import BucketLocks
from pbg_core.types import Bucket

TWITTER_NODES = 41_652_230  # SNAP twitter7 (the graph of PBG's paper)
TWITTER_EDGES = 1_468_365_182
POLICIES = ("every-bucket", "on-eviction")
Key = tuple[str, int]


@dataclass(frozen=True)
class Costs:
    """Per-bucket cost inputs (see the module docstring)."""

    edge_rate: float  # edges/s of one trainer (one core) at this dimension
    cores: int  # trainers per machine
    hogwild_efficiency: float  # measured rate of `cores` trainers / (cores x one trainer's)
    storage_mbps: float  # one machine's read or write bandwidth to the shared storage
    overhead_s: float  # coordinator time per bucket (serial)
    partition_bytes: float
    edges_per_bucket: float

    def compute_s(self) -> float:
        return self.edges_per_bucket / (self.cores * self.edge_rate * self.hogwild_efficiency)

    def transfer_s(self, partitions: int) -> float:
        return partitions * self.partition_bytes / (self.storage_mbps * 1e6)


@dataclass
class Storage:
    """Which machine holds which partition, and the reads and writes a save policy costs."""

    policy: str
    held: dict[str, set[Key]] = field(default_factory=dict)
    trained_by: dict[Key, str] = field(default_factory=dict)  # who trained its latest version
    unsaved: dict[Key, str] = field(default_factory=dict)  # on-eviction: a holder's unsaved version
    reads: int = 0
    writes: int = 0

    def start(self, machine: str, keys: set[Key]) -> int:
        """Partitions moved (read or written) before ``machine`` can train a bucket of ``keys``."""
        moved = 0
        mine = self.held.setdefault(machine, set())
        for key in keys:
            holder = self.unsaved.pop(key, None)
            if holder is not None and holder != machine:  # its holder saves it first
                self.held[holder].discard(key)
                self.writes, moved = self.writes + 1, moved + 1
            if key not in mine or self.trained_by.get(key, machine) != machine:
                self.reads, moved = self.reads + 1, moved + 1
        if self.policy == "on-eviction":
            evicted = [key for key in mine - keys if self.unsaved.get(key) == machine]
            for key in evicted:
                del self.unsaved[key]
            self.writes, moved = self.writes + len(evicted), moved + len(evicted)
        self.held[machine] = set(keys)
        return moved

    def finish(self, machine: str, keys: set[Key]) -> int:
        """Partitions ``machine`` saves once its bucket is trained."""
        for key in keys:
            self.trained_by[key] = machine
        if self.policy == "on-eviction":
            self.unsaved.update(dict.fromkeys(keys, machine))
            return 0
        self.writes += len(keys)
        return len(keys)

    def flush(self) -> int:
        """End of the pass: the most partitions one machine still has to save (they save in parallel)."""
        per_machine: dict[str, int] = {}
        for machine in self.unsaved.values():
            per_machine[machine] = per_machine.get(machine, 0) + 1
        self.writes += len(self.unsaved)
        self.unsaved.clear()
        return max(per_machine.values(), default=0)


def simulate(partitions: int, machines: int, costs: Costs, policy: str) -> dict[str, float]:
    """One epoch's schedule (not the first: no tree initialisation): seconds, busy share, reads, writes."""
    buckets = [Bucket(lhs, rhs) for lhs in range(partitions) for rhs in range(partitions)]

    def sides(bucket: Bucket) -> tuple[list[Key], list[Key]]:
        return [("node", bucket.lhs)], [("node", bucket.rhs)]

    locks = BucketLocks(buckets, sides, {"node": 1.0}, tree_init=False)
    storage = Storage(policy)
    events: list[tuple[float, int, str]] = []  # (finish time, tie-break, machine)
    free = [f"m{i}" for i in range(machines)]
    now, coordinator_free, busy, order = 0.0, 0.0, 0.0, 0
    while locks.remaining:
        for machine in list(free):
            bucket = locks.acquire(machine)
            if bucket is None:  # without tree initialisation no free bucket for one means none for all
                break
            keys = {("node", bucket.lhs), ("node", bucket.rhs)}
            moved = storage.start(machine, keys) + storage.finish(machine, keys)
            seconds = costs.compute_s() + costs.transfer_s(moved)
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
    now += costs.transfer_s(storage.flush())
    return {"seconds": now, "utilisation": busy / (now * machines), "reads": storage.reads, "writes": storage.writes}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=TWITTER_NODES)
    parser.add_argument("--edges", type=int, default=TWITTER_EDGES)
    parser.add_argument("--dimension", type=int, default=100)
    parser.add_argument(
        "--edge-rate", type=float, default=153_500, help="edges/s of one trainer at this dimension (measured)"
    )
    parser.add_argument(
        "--hogwild-efficiency", type=float, default=0.83, help="many trainers' rate / (trainers x one's) (measured)"
    )
    parser.add_argument("--cores", type=int, default=32, help="trainers per machine (assumed)")
    parser.add_argument(
        "--storage-mbps", type=float, nargs="+", default=[200.0, 1250.0], help="per-machine storage MB/s (assumed)"
    )
    parser.add_argument("--overhead-s", type=float, default=0.2, help="coordinator seconds per bucket (measured)")
    parser.add_argument("--partitions", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--machines", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows, results = [], []
    for mbps in args.storage_mbps:
        for partitions in args.partitions:
            costs = Costs(
                edge_rate=args.edge_rate,
                cores=args.cores,
                hogwild_efficiency=args.hogwild_efficiency,
                storage_mbps=mbps,
                overhead_s=args.overhead_s,
                partition_bytes=args.nodes / partitions * (args.dimension * 4 + 4),
                edges_per_bucket=args.edges / partitions**2,
            )
            for machines in args.machines:
                epochs = {policy: simulate(partitions, machines, costs, policy) for policy in POLICIES}
                results.append({"storage_mbps": mbps, "partitions": partitions, "machines": machines, **epochs})
            singles = {policy: results[-len(args.machines)][policy]["seconds"] for policy in POLICIES}
            for result in results[-len(args.machines) :]:
                ours, pbg_like = result["every-bucket"], result["on-eviction"]
                rows.append(
                    [
                        mbps,
                        partitions,
                        result["machines"],
                        round(ours["seconds"] / 60, 1),
                        round(singles["every-bucket"] / ours["seconds"], 2),
                        f"{ours['utilisation']:.0%}",
                        f"{ours['reads']}/{ours['writes']}",
                        round(pbg_like["seconds"] / 60, 1),
                        round(singles["on-eviction"] / pbg_like["seconds"], 2),
                        f"{pbg_like['reads']}/{pbg_like['writes']}",
                    ]
                )
            print(
                f"P={partitions}, {mbps:g} MB/s: compute {costs.compute_s():.2f} s/bucket, "
                f"partition {costs.partition_bytes / 1e9:.2f} GB ({costs.transfer_s(1):.1f} s to move)"
            )
    headers = ["MB/s", "P", "machines", "epoch min", "speedup", "busy", "reads/writes",
               "on-eviction min", "speedup", "reads/writes"]  # fmt: skip
    print(format_table(headers, rows))
    path = write_json("scaling_model", {"inputs": vars(args), "results": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
