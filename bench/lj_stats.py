"""Where an epoch's time went, from our stats rows and step log lines, and PBG 1.0.0's log.

Ours (``pbg train -v``: the engine's step lines, ``HH:MM:SS.mmm | LEVEL | name - message``):
- **epoch**: from the first ``bucket (l, r) (1 of N): swapping partitions`` line to the
  ``committing version V`` line (the pointer write itself is milliseconds);
- **checkpoint**: ``writing checkpoint version V`` -> ``committing version V``;
- per bucket, from ``<checkpoint_path>/training_stats.json`` rows: ``timing.train`` (HOGWILD
  compute), ``timing.load_edges``, ``timing.save`` (the bucket's progress save: its dirty
  partitions and the progress record), ``timing.eval_before/after``, and ``io``: ``seconds``
  is partition I/O on the training thread (loads and evicting saves; with load-ahead /
  save-behind, the time it waited for the I/O thread), ``bytes_read``, ``bytes_written``. Any
  ``timing`` key with ``wait`` in its name is summed under its own name; a figure no row
  carries is reported as None ("n/a").
- **other**: epoch minus everything above (log lines, bucket bookkeeping, anything unlabelled).
- **overlapped** (not part of the sum: it runs while a bucket trains): ``io.background_seconds``,
  partition I/O done on the I/O thread, where the engine records it.

PBG 1.0.0 logs per bucket ``( l , r ): bucket i / n : Processed N edges in T s ( X M/sec );
io: S s ( Y MB/sec )``: ``T`` is its HOGWILD compute time (including ``hogwild_delay``, which every worker but the
first sleeps at every bucket of epoch 0), ``S`` the time before it: partition swap, edge
loading (and held-out evaluation when ``eval_fraction`` > 0).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

_OURS_LINE = re.compile(r"^(\d{2}:\d{2}:\d{2}\.\d{3}) \|[^|]*\| (\S+) - (.*)$")
_FIRST_SWAP = re.compile(r"bucket \(\d+, \d+\) \(1 of \d+\): swapping partitions")
_WRITING = re.compile(r"writing checkpoint version (\d+)")
_COMMIT = re.compile(r"committing version (\d+)")
_PBG_BUCKET = re.compile(r"Processed (\d+) edges in ([0-9.]+) s .*?io: ([0-9.]+) s")


def _seconds(stamp: str) -> float:
    clock = dt.datetime.strptime(stamp, "%H:%M:%S.%f")
    return clock.hour * 3600 + clock.minute * 60 + clock.second + clock.microsecond / 1e6


def _span(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return end - start if end >= start else end - start + 86400  # across midnight


def log_marks(text: str) -> dict[str, float | None]:
    """Seconds-of-day of the epoch's first swap, the checkpoint write, and the commit."""
    marks: dict[str, float | None] = {"first_swap": None, "writing": None, "commit": None}
    for line in text.splitlines():
        match = _OURS_LINE.match(line)
        if not match:
            continue
        when, message = _seconds(match.group(1)), match.group(3)
        if marks["first_swap"] is None and _FIRST_SWAP.search(message):
            marks["first_swap"] = when
        elif _WRITING.search(message):
            marks["writing"] = when
        elif _COMMIT.search(message):
            marks["commit"] = when
    return marks


def read_rows(path: Path) -> list[dict]:
    """Per-bucket rows (those with ``stats``) of a JSON-lines training_stats.json."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [row for row in rows if "stats" in row]


def _total(rows: list[dict], section: str, key: str) -> float | None:
    """Sum of ``row[section][key]`` over the rows that carry it; None when none does."""
    values = [float(row[section][key]) for row in rows if key in row.get(section, {})]
    return sum(values) if values else None


def epoch_breakdown(rows: list[dict], log_text: str) -> dict[str, object]:
    """Epoch seconds and each part's seconds and share of it (None where not recorded)."""
    marks = log_marks(log_text)
    epoch = _span(marks["first_swap"], marks["commit"])
    wait_keys = sorted({k for row in rows for k in row.get("timing", {}) if "wait" in k})
    parts: dict[str, float | None] = {
        "train": _total(rows, "timing", "train"),
        "partition_io_on_training_thread": _total(rows, "io", "seconds"),
        "load_edges": _total(rows, "timing", "load_edges"),
        "progress_saves": _total(rows, "timing", "save"),
        "eval_before": _total(rows, "timing", "eval_before"),
        "eval_after": _total(rows, "timing", "eval_after"),
        "checkpoint": _span(marks["writing"], marks["commit"]),
        **{f"wait:{k}": _total(rows, "timing", k) for k in wait_keys},
    }
    known = [v for v in parts.values() if v is not None]
    parts["other"] = epoch - sum(known) if epoch is not None else None
    background = _total(rows, "io", "background_seconds")
    if not wait_keys and background is None:
        parts["load_ahead_save_behind_waits"] = None  # not recorded by this engine version
    return {
        "epoch_s": epoch,
        "seconds": parts,
        "overlapped_io_s": background,
        "share": {k: (v / epoch if v is not None and epoch else None) for k, v in parts.items()},
        "log_marks_found": {k: v is not None for k, v in marks.items()},
    }


def ours_throughput(rows: list[dict]) -> dict[str, object]:
    """Train edges, compute seconds (timing.train) and edges/s; engine partition I/O bytes."""
    edges = sum(int(row["stats"]["count"]) for row in rows)
    seconds = _total(rows, "timing", "train")
    return {
        "buckets": len(rows),
        "edges": edges,
        "compute_s": seconds,
        "edges_per_s": edges / seconds if seconds else None,
        "swap_bytes_written": _total(rows, "io", "bytes_written"),
        "swap_bytes_read": _total(rows, "io", "bytes_read"),
    }


def pbg_throughput(log_text: str) -> dict[str, object]:
    """PBG 1.0.0's buckets, edges, compute seconds and edges/s from its per-bucket lines."""
    buckets = [(int(m.group(1)), float(m.group(2)), float(m.group(3))) for m in _PBG_BUCKET.finditer(log_text)]
    edges, seconds = sum(b[0] for b in buckets), sum(b[1] for b in buckets)
    return {
        "buckets": len(buckets),
        "edges": edges,
        "compute_s": seconds,
        "io_s": sum(b[2] for b in buckets),
        "edges_per_s": edges / seconds if seconds else None,
        "source": "PBG log 'Processed N edges in T s ... io: S s' per bucket",
    }
