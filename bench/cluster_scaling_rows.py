"""What bench/cluster_scaling.py reads back from one finished ``pbg train``: its stats rows, its log, its files.

- :func:`summarize_rows`: the run's rates (one trainer's in-bucket rate, all machines' in-bucket
  rate together, the whole-run rate), the mean of each ``timing`` field, the bucket time per
  machine, the gap, and per epoch the bytes read and written against the minimum;
- :func:`log_phases`: the run's wall time cut at its log lines (start-up, first bucket, bucket
  span, tail) and each machine's dead time between two buckets;
- :func:`partition_file_bytes`: the sizes of the committed version's partition files.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

from _common import ratio


def bucket_rows(checkpoint: Path) -> list[dict[str, Any]]:
    """The per-bucket rows of training_stats.json (the iterations' eval summaries skipped)."""
    path = checkpoint / "training_stats.json"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if "eval_stats_chunk_avg" not in r and "stats" in r]


def bucket_seconds(row: dict[str, Any]) -> float:
    """A bucket's time on its machine: the sum of its timing fields."""
    return sum(float(v) for v in (row.get("timing") or {}).values() if isinstance(v, int | float))


def per_machine_split(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Buckets, bucket seconds and edges of each machine (``machine`` of a row; ``local`` if absent)."""
    per_machine: dict[str, dict[str, float]] = {}
    for r in rows:
        entry = per_machine.setdefault(str(r.get("machine", "local")), {"buckets": 0, "bucket_s": 0.0, "edges": 0})
        entry["buckets"] += 1
        entry["bucket_s"] += bucket_seconds(r)
        entry["edges"] += int(r["stats"]["count"])
    return per_machine


def per_epoch_io(rows: list[dict[str, Any]], minimum: int) -> list[dict[str, float]]:
    """Per epoch (in order): buckets, bytes read and written, io seconds, and bytes against ``minimum``."""
    epochs: dict[int, dict[str, float]] = {}
    for r in rows:
        epoch = epochs.setdefault(int(r.get("epoch_idx", 0)), {"buckets": 0, "bytes_read": 0, "bytes_written": 0})
        io = r.get("io") or {}
        epoch["buckets"] += 1
        epoch["bytes_read"] += int(io.get("bytes_read", 0))
        epoch["bytes_written"] += int(io.get("bytes_written", 0))
        epoch["io_seconds"] = epoch.get("io_seconds", 0.0) + float(io.get("seconds", 0.0))
    for epoch in epochs.values():
        epoch["read_vs_minimum"] = ratio(epoch["bytes_read"], minimum)
        epoch["written_vs_minimum"] = ratio(epoch["bytes_written"], minimum)
    return [epochs[e] for e in sorted(epochs)]


def summarize_rows(rows: list[dict[str, Any]], wall_s: float, machines: int, minimum: int) -> dict[str, Any]:
    """Rates, per-bucket time split, bytes per epoch against ``minimum`` and the gap of one run.

    ``train_edges_per_s``: edges over the sum of ``timing.train`` (one trainer's rate inside its
    buckets); ``aggregate_train_edges_per_s``: edges over that sum divided by ``machines`` (all
    machines' in-bucket rate together); ``whole_run_edges_per_s``: edges over the wall time.
    """
    edges = sum(int(r["stats"]["count"]) for r in rows)
    train_s = sum(float(r.get("timing", {}).get("train", 0.0)) for r in rows)
    keys = sorted({k for r in rows for k in (r.get("timing") or {})})
    timing_mean = {k: statistics.fmean(float(r.get("timing", {}).get(k, 0.0)) for r in rows) for k in keys}
    per_machine = per_machine_split(rows)
    buckets_s = sum(m["bucket_s"] for m in per_machine.values())
    per_epoch = per_epoch_io(rows, minimum)
    return {
        "buckets": len(rows),
        "edges": edges,
        "train_s": train_s,
        "train_edges_per_s": ratio(edges, train_s),
        "aggregate_train_edges_per_s": ratio(edges, train_s / machines),
        "whole_run_edges_per_s": ratio(edges, wall_s),
        "timing_mean_s": timing_mean,
        "bucket_mean_s": buckets_s / len(rows) if rows else None,
        "buckets_total_s": buckets_s,
        "per_machine": per_machine,
        "gap_s": wall_s - buckets_s / machines if rows else None,
        "per_epoch": per_epoch,
        "bytes_read_per_epoch": statistics.fmean(e["bytes_read"] for e in per_epoch) if per_epoch else None,
        "bytes_written_per_epoch": statistics.fmean(e["bytes_written"] for e in per_epoch) if per_epoch else None,
        "minimum_bytes_per_epoch": minimum,
    }


_LOG_LINE = re.compile(r"^(\d{2}):(\d{2}):(\d{2}\.\d{3}) \|[^|]*\| (.*)$")
_TRAINED = re.compile(r"bucket \((\d+), (\d+)\): trained (\d+) edges")
_ON_MACHINE = re.compile(r"train bucket \(\d+, \d+\) on (\S+?)'")


def log_marks(text: str, started_at: float) -> tuple[dict[str, float], dict[str, list[float]]]:
    """(first lease and cluster-start offsets, each machine's ``trained`` line offsets), in s from the spawn."""
    local = time.localtime(started_at)
    spawn = local.tm_hour * 3600 + local.tm_min * 60 + local.tm_sec + started_at % 1

    def offset(match: re.Match[str]) -> float:
        clock = int(match.group(1)) * 3600 + int(match.group(2)) * 60 + float(match.group(3))
        return (clock - spawn + 43200) % 86400 - 43200  # across midnight

    marks: dict[str, float] = {}
    trained: dict[str, list[float]] = {}
    for line in text.splitlines():
        match = _LOG_LINE.match(line)
        if not match:
            continue
        message = match.group(4)
        if _TRAINED.search(message):
            on = _ON_MACHINE.search(message)
            trained.setdefault(on.group(1) if on else "local", []).append(offset(match))
        elif "lease on" in message and "taken" in message:
            marks.setdefault("lease", offset(match))
        elif "started a local Dask cluster" in message:
            marks.setdefault("cluster", offset(match))
    return marks, trained


def machine_phases(trained: dict[str, list[float]], rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per machine: its buckets, first and last ``trained`` line and its dead time per bucket."""
    machines = {}
    for machine, times in trained.items():
        own = sorted((r for r in rows if str(r.get("machine", "local")) == machine), key=lambda r: r["index"])
        later = sum(bucket_seconds(r) for r in own[1:])
        dead = (times[-1] - times[0] - later) / (len(times) - 1) if len(times) > 1 else None
        machines[machine] = {
            "buckets": len(times),
            "first_trained_s": times[0],
            "last_trained_s": times[-1],
            "dead_per_bucket_s": dead,
        }
    return machines


def log_phases(text: str, started_at: float, wall_s: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a run's wall time went, from its log lines' clock (offsets from the spawn, in s).

    - ``startup``: spawn -> the checkpoint lease is taken (CLI, Prefect's server, config, plan);
    - ``to_first_bucket``: lease -> the first ``trained`` line (cluster start, machine build,
      the first bucket itself);
    - ``bucket_span``: first -> last ``trained`` line; ``tail``: last ``trained`` line -> exit
      (last save, checkpoint commit, cluster and server shutdown);
    - per machine: its buckets, first and last ``trained`` line, and its **dead time per bucket**:
      (last - first - the bucket times of its buckets after the first) / (buckets - 1), i.e. what
      a machine waits between two buckets beyond their own timing fields (hand-out, Dask round
      trip, recording). A distributed run's machine lines are relayed when the bucket's task
      ends (after the machine's save); one machine's are logged right after training.
    """
    marks, trained = log_marks(text, started_at)
    if not trained:
        return {}
    first = min(t[0] for t in trained.values())
    last = max(t[-1] for t in trained.values())
    machines = machine_phases(trained, rows)
    lease = marks.get("lease")
    deads = [m["dead_per_bucket_s"] for m in machines.values() if m["dead_per_bucket_s"] is not None]
    return {
        "startup_s": lease,
        "cluster_started_s": marks.get("cluster"),
        "to_first_bucket_s": first - lease if lease is not None else None,
        "bucket_span_s": last - first,
        "tail_s": wall_s - last,
        "dead_per_bucket_s": statistics.fmean(deads) if deads else None,
        "machines": machines,
    }


def partition_file_bytes(checkpoint: Path, entity: str) -> dict[str, int]:
    """Sizes of the committed version's partition files of ``entity`` (embeddings and optimizer state)."""
    try:
        version = int((checkpoint / "checkpoint_version.txt").read_text().strip())
    except (OSError, ValueError):
        return {}
    files = sorted(checkpoint.glob(f"embeddings_{entity}_*.v{version}.h5"))
    return {f.name: f.stat().st_size for f in files}
