"""Retraining run directories planted for storage tests: names that sort by day, committed versions, leases."""

from __future__ import annotations

import json
import time

from store_io import StorePath

ENTITIES = {"node": {"num_partitions": 2}}
RELATIONS = [{"name": "linked", "lhs": "node", "rhs": "node"}]


def run_name(day: int) -> str:
    """A valid run directory name that sorts by ``day``."""
    return f"run-202603{day:02d}T000000Z-{day:08x}"


def plant_run(
    root: StorePath, day: int, version: int, init_path: str | None = None, lacking: tuple[str, ...] = ()
) -> StorePath:
    """A run directory: a version pointer, a config.json (2 node partitions) naming its init_path, and
    version ``version``'s model and embeddings files but those named in ``lacking``."""
    run = root / run_name(day)
    run.mkdir(parents=True, exist_ok=True)
    (run / "checkpoint_version.txt").write_text(f"{version}\n")
    (run / "config.json").write_text(json.dumps({"init_path": init_path, "entities": ENTITIES, "relations": RELATIONS}))
    if version > 0:
        for name in (f"model.v{version}.h5", f"embeddings_node_0.v{version}.h5", f"embeddings_node_1.v{version}.h5"):
            if name not in lacking:
                (run / name).write_bytes(b"h5")
    return run


def plant_lease(run: StorePath, expires_in: float) -> None:
    """A lease.json of a holder on another host (so only its expiry tells whether it is live)."""
    holder = {
        "token": "t",
        "run": "other",
        "host": "elsewhere",
        "pid": 1,
        "started": "",
        "expires_at": time.time() + expires_in,
    }
    (run / "lease.json").write_text(json.dumps(holder))


def promote(root: StorePath, day: int, version: int) -> None:
    """A latest.json naming the run of ``day``."""
    latest = {"run": run_name(day), "checkpoint_path": str(root / run_name(day)), "version": version}
    (root / "latest.json").write_text(json.dumps(latest | {"completed_at": "2026-03-01T00:00:00+00:00"}))
