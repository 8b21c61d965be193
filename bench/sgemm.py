"""This machine's single-precision matmul (sgemm) throughput, measured with torch.

It is the yardstick for "achieved fraction of sgemm FLOP/s" in bench.speed: a training run's
useful FLOP/s (model FLOPs per edge x edges/s) divided by what the same cores reach on large
square float32 matmuls. Measured with 1 thread and with all usable threads (the CPU affinity
mask, which is what the HOGWILD workers share). Each figure is the best of ``repeats`` timed
matmuls after a warm-up, because on a shared machine the best run is the least disturbed one.
FLOPs of an n x n by n x n matmul: 2 n^3.

Run: ``python -m bench.sgemm [--size 2048] [--repeats 5]``; prints a table and JSON, writes
bench/results/sgemm.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from bench.lib.report import format_table, write_json
from bench.lib.tools import machine_info


def measure_sgemm(size: int, threads: int, repeats: int) -> dict[str, float | int]:
    """Best-of-``repeats`` FLOP/s of ``size`` x ``size`` float32 matmuls on ``threads`` threads.

    Args:
        size: Matrix side n, > 0.
        threads: torch intra-op threads for the measurement (restored afterwards).
        repeats: Timed runs, > 0; the fastest counts.

    Returns:
        ``{"size", "threads", "repeats", "best_s", "flops"}`` with ``flops`` in FLOP/s.

    Raises:
        ValueError: If ``size``, ``threads`` or ``repeats`` is not positive.
    """
    for name, value in (("size", size), ("threads", threads), ("repeats", repeats)):
        if value <= 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(0)
        a = torch.randn(size, size, generator=generator)
        b = torch.randn(size, size, generator=generator)
        out = torch.empty(size, size)
        torch.mm(a, b, out=out)  # warm-up: thread pool start, page faults on `out`
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous)
    return {"size": size, "threads": threads, "repeats": repeats, "best_s": best, "flops": 2.0 * size**3 / best}


def measure_machine(size: int = 2048, repeats: int = 5) -> dict[str, object]:
    """sgemm FLOP/s with 1 thread and with every usable CPU.

    Returns:
        ``{"one_thread": {...}, "all_threads": {...}, "usable_cpus": N}`` (see measure_sgemm).
    """
    usable = len(os.sched_getaffinity(0))
    return {
        "one_thread": measure_sgemm(size, 1, repeats),
        "all_threads": measure_sgemm(size, usable, repeats),
        "usable_cpus": usable,
    }


def sgemm_table(result: dict[str, object]) -> str:
    """Text table of a measure_machine() result."""
    rows = []
    for key in ("one_thread", "all_threads"):
        run = result[key]
        rows.append([key, run["threads"], run["size"], run["best_s"], run["flops"] / 1e9])
    return format_table(["run", "threads", "n", "best s", "GFLOP/s"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure sgemm FLOP/s with torch.")
    parser.add_argument("--size", type=int, default=2048, help="matrix side n")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs; the best counts")
    args = parser.parse_args(argv)
    result = measure_machine(args.size, args.repeats)
    print(sgemm_table(result))
    path = write_json("sgemm", {"machine": machine_info(), "sgemm": result})
    print(json.dumps(result))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
