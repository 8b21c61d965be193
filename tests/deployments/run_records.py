"""What a deployment run left behind: its checkpoint's training stats and its records on the server.

The server receives a run's logs, task runs and artifacts in batches, some after the run's final
state: the readers here poll until the expected count is there (60 s at most), then return what
there is, so the test's own assertion names what is missing.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from stack import Stack

TRAINING_LINE = re.compile(r"bucket \(\d+, \d+\): training \d+ edges")
SETTLE_S = 60  # how long a reader waits for late records


def stats_rows(checkpoint: Path) -> list[dict[str, Any]]:
    """training_stats.json, one dict per line."""
    return [json.loads(line) for line in (checkpoint / "training_stats.json").read_text().splitlines()]


def epoch_metrics(checkpoint: Path, epoch_idx: int) -> dict[str, float]:
    """Metrics of epoch ``epoch_idx``'s stats rows, flat: ``"(l, r) eval_stats_after mrr" -> value``.

    Per bucket: training loss and eval before/after; plus the pass's eval summary. Timings
    (which differ between runs) are left out.
    """
    out: dict[str, float] = {}
    for row in stats_rows(checkpoint):
        if row["epoch_idx"] != epoch_idx:
            continue
        where = f"({row['lhs_partition']}, {row['rhs_partition']})" if "lhs_partition" in row else "pass"
        for part in ("stats", "eval_stats_before", "eval_stats_after", "eval_stats_chunk_avg"):
            if part in row:
                out[f"{where} {part} count"] = row[part]["count"]
                out.update({f"{where} {part} {name}": value for name, value in row[part]["metrics"].items()})
    return out


def timestamp(value: str) -> float:
    """An API timestamp (ISO 8601, UTC) as POSIX seconds."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def training_logs(stack: Stack, flow_run_id: str, at_least: int, since: float = 0.0) -> list[dict[str, Any]]:
    """The engine's "training N edges" log records of the run and its subflows, from ``since`` on,
    once at least ``at_least`` are there."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        records = [
            record
            for record in stack.logs(stack.run_and_subflow_ids(flow_run_id))
            if TRAINING_LINE.search(record["message"]) and timestamp(record["timestamp"]) >= since
        ]
        if len(records) >= at_least or time.monotonic() > deadline:
            return records
        time.sleep(1)


def wait_for_artifacts(stack: Stack, flow_run_id: str, count: int) -> list[dict[str, Any]]:
    """The artifacts of the run and its subflows, once at least ``count`` are there."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        artifacts = stack.artifacts(stack.run_and_subflow_ids(flow_run_id))
        if len(artifacts) >= count or time.monotonic() > deadline:
            return artifacts
        time.sleep(1)


def table_keys(checkpoint_name: str, num_epochs: int) -> list[str]:
    """The keys of the run's table artifacts, one per epoch (1 edge path, 1 chunk)."""
    return [f"pbg-{checkpoint_name}-epoch-{epoch:03d}-path-1-chunk-1" for epoch in range(1, num_epochs + 1)]


def task_run_names(stack: Stack, flow_run_id: str, at_least: int) -> list[str]:
    """Names of the task runs of the run and its subflows, once at least ``at_least`` are recorded
    and two reads a second apart agree.

    The server records task runs in batches; one inserted while the pages are read shifts the
    pages (a row twice, another missed), hence the second read and the de-duplication by id.
    """
    deadline = time.monotonic() + SETTLE_S
    previous: dict[str, str] = {}
    while True:
        runs = {run["id"]: run["name"] for run in stack.task_runs(stack.run_and_subflow_ids(flow_run_id))}
        if (len(runs) >= at_least and runs == previous) or time.monotonic() > deadline:
            return list(runs.values())
        previous = runs
        time.sleep(1)
