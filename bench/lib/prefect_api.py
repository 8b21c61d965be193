"""The Prefect REST calls the deployed-run benchmarks need: flow-run states, the run tree, its logs and task runs."""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import httpx

RUN_TIMEOUT_S = 600
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "CRASHED"})
FIRST_BATCH = re.compile(r"training .*edges on")  # the engine's line right before a bucket's first batch


def epoch_s(stamp: str) -> float:
    """Seconds since the epoch of an API timestamp (ISO 8601 with an offset)."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Api:
    """The few REST calls the benchmark needs."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=30)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One request; the decoded JSON answer."""
        response = self.client.request(method, path, json=body)
        response.raise_for_status()
        return response.json() if response.content else None

    def deployment_exists(self, name: str) -> bool:
        """True once ``flow/deployment`` is registered."""
        return self.client.get(f"/deployments/name/{name}").status_code == 200

    def wait_done(self, run_id: str, poll_s: float = 1.0) -> dict[str, Any]:
        """Poll the flow run every ``poll_s`` seconds until it is terminal; raise unless it COMPLETED."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            run: dict[str, Any] = self.call("GET", f"/flow_runs/{run_id}")
            state = (run.get("state") or {}).get("type", "NONE")
            if state in TERMINAL:
                if state != "COMPLETED":
                    raise RuntimeError(f"flow run {run_id} ended {state}: {run['state'].get('message')}")
                return run
            if time.monotonic() > deadline:
                raise RuntimeError(f"flow run {run_id} still {state} after {RUN_TIMEOUT_S} s")
            time.sleep(poll_s)

    def run_tree(self, run_id: str) -> list[str]:
        """The run's id and those of its subflows, at any depth."""
        ids, todo = [run_id], [run_id]
        while todo:
            body = {"flow_runs": {"parent_flow_run_id": {"any_": todo}}, "limit": 200}
            todo = [row["id"] for row in self.call("POST", "/flow_runs/filter", body)]
            ids += todo
        return ids

    def logs(self, run_id: str) -> list[dict[str, Any]]:
        """Every log record of the run tree, oldest first."""
        body = {"logs": {"flow_run_id": {"any_": self.run_tree(run_id)}}, "sort": "TIMESTAMP_ASC", "limit": 200}
        rows: list[dict[str, Any]] = []
        while True:
            page = self.call("POST", "/logs/filter", {**body, "offset": len(rows)})
            rows += page
            if len(page) < 200:
                return rows

    def log_times(self, run_id: str, pattern: re.Pattern[str], expected: int, wait_s: float) -> list[float]:
        """Timestamps of the run tree's log records whose message ``pattern`` finds, oldest first.

        The API log handler ships records in batches, some after the flow run ended: wait up to
        ``wait_s`` until ``expected`` of them are there, then return what there is.
        """
        deadline = time.monotonic() + wait_s
        while True:
            found = [epoch_s(row["timestamp"]) for row in self.logs(run_id) if pattern.search(row["message"])]
            if len(found) >= expected or time.monotonic() > deadline:
                return found
            time.sleep(1)

    def first_batch_log(self, run_id: str, wait_s: float = 5) -> float | None:
        """Timestamp of the earliest "training N edges on W workers" log of the run tree."""
        found = self.log_times(run_id, FIRST_BATCH, 1, wait_s)
        return found[0] if found else None

    def first_train_task(self, run_id: str, expected: int, wait_s: float = 180) -> float | None:
        """Earliest start of the run tree's "train bucket" task runs (whose body logs that line).

        Task runs reach the database through the event pipeline, after the flow run may have
        ended: wait until all ``expected`` of them are there, so the earliest is among them.
        """
        deadline = time.monotonic() + wait_s
        while True:
            body = {
                "task_runs": {"flow_run_id": {"any_": self.run_tree(run_id)}, "name": {"like_": "train bucket"}},
                "limit": 200,
            }
            starts = [
                epoch_s(row["start_time"])
                for row in self.call("POST", "/task_runs/filter", body)
                if row.get("start_time")
            ]
            if len(starts) >= expected or (starts and time.monotonic() > deadline):
                return min(starts)
            if time.monotonic() > deadline:
                return None
            time.sleep(2)
