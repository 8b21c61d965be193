"""One minimal Prefect run for bench.prefect_costs: a flow of N subflows of K no-op tasks.

Run in a fresh process per measurement; prints one JSON line of wall-clock marks (``time.time()``,
so the caller can measure from before it spawned the process): when each subflow body started
and ended, when the flow returned, and when the process is about to exit.

Variants (``--variant``):
- ``prefect``: Prefect's own ephemeral mode (its temporary server starts on first use),
  default settings (flow-run heartbeats every 180 s, joined at each flow's end).
- ``no-heartbeat``: the same, with heartbeats off for the run (``temporary_settings``).
- ``embedded``: our embedded server (flows/prefect_host/local_server.py) started first, heartbeats off,
  subflows called one after another.
- ``pipelined``: ``embedded`` plus bench/lib/subflow_pipeline.py (what the product did before
  issue 34): each subflow created while the previous body runs, bodies in this thread.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from functools import partial

VARIANTS = ("prefect", "no-heartbeat", "embedded", "pipelined")


def since() -> float:
    """The wall clock (the caller subtracts its own spawn time)."""
    return time.time()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=VARIANTS, required=True)
    parser.add_argument("--subflows", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=9)
    args = parser.parse_args(argv)
    embedded = args.variant in ("embedded", "pipelined")
    server_cm = contextlib.nullcontext()
    if embedded:
        from flows.prefect_host.local_server import local_api

        server_cm = local_api(enabled=True)
    with server_cm as server:
        marks = run_flow(args, server)
    marks["exit"] = since()
    print(json.dumps(marks))
    sys.stdout.flush()
    if embedded:
        os._exit(0)  # as `pbg` does: no interpreter teardown (its server is already stopped)
    return 0  # Prefect's own temporary server is stopped by its exit handler


def run_flow(args: argparse.Namespace, server: object) -> dict[str, object]:
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    from bench.lib.subflow_pipeline import SubflowPipeline, run_body

    bodies: list[tuple[float, float]] = []

    @task(cache_policy=NO_CACHE)
    def step(i: int) -> int:
        return i

    def steps(k: int) -> int:
        start = since()
        for i in range(args.tasks):
            step(i)
        bodies.append((start, since()))
        return k

    @flow(name="minimal-iteration", validate_parameters=False)
    def iteration(k: int) -> object:
        return run_body(steps, k)

    @flow(name="minimal")
    def parent() -> None:
        calls = [partial(iteration, k) for k in range(args.subflows)]
        if args.variant == "pipelined":
            list(SubflowPipeline().run_in_order(calls, [str(k) for k in range(args.subflows)], lambda i: True))
        else:
            for call in calls:
                call()

    if server is not None:
        server.wait_ready()
    settings = (
        temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})
        if args.variant != "prefect"
        else contextlib.nullcontext()
    )
    with settings:
        parent()
    return {"variant": args.variant, "bodies": bodies, "flow_returned": since()}


if __name__ == "__main__":
    sys.exit(main())
