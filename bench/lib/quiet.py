"""Measuring on a shared machine: the measurement lock, a wait for a quiet machine, and commands
started together with the CPU other people's processes took meanwhile.

Other people's processes (tests, type checkers) on a shared 2-core machine change a measurement
far more than its noise; the lock keeps several people's measured commands from overlapping (the
lock ``flock PATH command`` takes), the quiet wait keeps others' work out of a measurement's
start, and the record says how much foreign CPU it still saw.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from bench.lib.runner import RunResult, run_measured, tail

QUIET_WINDOW_S = 3.0
QUIET_WINDOWS = 2
QUIET_CORES = 0.2  # "quiet": the whole machine busier than this many cores over a window is not


@contextlib.contextmanager
def measurement_lock(path: Path | None) -> Iterator[None]:
    """Hold an exclusive flock(2) on ``path`` (created if missing) for the block; no-op if None."""
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class Job(NamedTuple):
    """One command to measure: argv, working directory (logs go there), log base name, extra env."""

    argv: list[str]
    cwd: Path
    name: str
    env: dict[str, str]


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """CPU seconds of this script and of every descendant it (or they) reaped."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )


def wait_quiet(max_wait_s: float) -> float:
    """Wait (at most ``max_wait_s``) until the machine is idle over two windows in a row; seconds waited."""
    started, quiet = time.monotonic(), 0
    while quiet < QUIET_WINDOWS and time.monotonic() - started < max_wait_s:
        before = busy_cpu_seconds()
        time.sleep(QUIET_WINDOW_S)
        quiet = quiet + 1 if busy_cpu_seconds() - before < QUIET_CORES * QUIET_WINDOW_S else 0
    return time.monotonic() - started


def start_all(jobs: list[Job]) -> list[RunResult]:
    """run_measured of every job; several at once start together (one thread each, a barrier first)."""
    if len(jobs) == 1:
        job = jobs[0]
        return [run_measured(job.argv, job.cwd, job.name, env=job.env)]
    barrier = threading.Barrier(len(jobs))

    def measured(job: Job) -> RunResult:
        barrier.wait()
        return run_measured(job.argv, job.cwd, job.name, env=job.env)

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(measured, jobs))


def run_together(jobs: list[Job], lock: Path | None, quiet_wait_s: float) -> list[RunResult]:
    """Measured commands started at the same moment: one lock, one quiet wait (up to ``quiet_wait_s``,
    0: none) before all, each echoed first; each result's ``cpu`` tells whose CPU they shared.

    ``cpu``: the machine's busy CPU seconds during the commands, ours (the commands' process trees,
    counted as their processes are reaped, and this script), the others' (the difference: anyone
    else's processes), the others' average in cores, the load averages before and after, and the
    seconds waited for a quiet machine. With several commands it is one record over the span from
    the first spawn to the last exit (``span_s``, ``together``: how many commands).
    """
    for job in jobs:
        print(f"$ {' '.join(job.argv)}", flush=True)
    with measurement_lock(lock):
        waited = wait_quiet(quiet_wait_s) if quiet_wait_s > 0 else 0.0
        load_before, busy, ours = os.getloadavg()[0], busy_cpu_seconds(), own_cpu_seconds()
        results = start_all(jobs)
        busy, ours = busy_cpu_seconds() - busy, own_cpu_seconds() - ours
    others = max(0.0, busy - ours)
    span = results[0].wall_s
    if len(results) > 1:
        span = max(r.started_at + r.wall_s for r in results) - min(r.started_at for r in results)
    cpu: dict[str, Any] = {
        "busy_s": busy,
        "ours_s": ours,
        "others_s": others,
        "others_cores": others / span if span else None,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg()[0],
        "quiet_wait_s": waited,
    }
    if len(results) > 1:
        cpu.update(together=len(results), span_s=span)
    for result in results:
        result.cpu = cpu
        status = "ok" if result.ok else f"FAILED (exit {result.returncode}), see {result.stderr_path}"
        print(f"  {result.wall_s:.1f} s, {status}; others' CPU {others:.1f} s, waited {waited:.0f} s", flush=True)
        if not result.ok:
            print(tail(result.stderr, 20), flush=True)
    return results
