"""Where an epoch's time went, from our stats rows and step log lines, and PBG 1.0.0's log.

Ours (``pbg train -v``: the engine's step lines, ``HH:MM:SS.mmm | LEVEL | name - message``).
The epoch runs from the first ``bucket (l, r) (1 of N): swapping partitions`` line to
``committing version V`` (the pointer write itself is milliseconds), and is split without
overlap by the step lines of each bucket (swapping -> ``training N edges`` -> ``trained`` ->
the next bucket's swapping, or ``writing checkpoint version V``) and the per-bucket rows of
``<checkpoint_path>/training_stats.json``:
- **train**: ``timing.train`` (HOGWILD compute);
- **partition_swap_step**: swapping -> training, minus ``timing.load_edges`` and
  ``timing.eval_before`` (also listed): partition loads and evicting saves on the training
  thread (or its waits for them when they run behind compute), plus the step's own overhead
  (the Prefect task runs between the two lines);
- **progress_saves**: ``timing.save`` (the save point after a bucket: dirty partitions, model,
  progress record); **eval_after**: ``timing.eval_after``;
- **checkpoint**: ``writing checkpoint version V`` -> ``committing version V``;
- **other**: the epoch minus the above (log lines, bookkeeping, anything unlabelled).
Beside the split, not in its sum, the engine's own counters where its rows carry them:
``io.seconds`` (partition I/O on the training thread; an engine that records the row after
the save point counts the save's partition writes there too), ``io.background_seconds``
(partition I/O done on an I/O thread while buckets train), and any ``timing`` key with
``wait`` in its name. A figure no row or line gives is None ("n/a"), never a guess.

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
_STEPS = (
    ("swap", re.compile(r"bucket \(\d+, \d+\) \((\d+) of \d+\): swapping partitions")),
    ("train", re.compile(r"bucket \(\d+, \d+\): training \d+ edges on")),
    ("trained", re.compile(r"bucket \(\d+, \d+\): trained \d+ edges in")),
    ("writing", re.compile(r"writing checkpoint version \d+")),
    ("commit", re.compile(r"committing version \d+")),
)
_PBG_BUCKET = re.compile(r"Processed (\d+) edges in ([0-9.]+) s .*?io: ([0-9.]+) s")


def _seconds(stamp: str) -> float:
    clock = dt.datetime.strptime(stamp, "%H:%M:%S.%f")
    return clock.hour * 3600 + clock.minute * 60 + clock.second + clock.microsecond / 1e6


def _span(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return end - start if end >= start else end - start + 86400  # across midnight


def step_events(text: str) -> list[tuple[str, float]]:
    """(step, seconds of day) of the engine's step lines from the first bucket's swap on."""
    events: list[tuple[str, float]] = []
    for line in text.splitlines():
        match = _OURS_LINE.match(line)
        if not match:
            continue
        for step, pattern in _STEPS:
            found = pattern.search(match.group(3))
            if not found:
                continue
            if step == "swap" and found.group(1) == "1":
                events = []  # the pass starts (again, after a resumed or repeated first bucket)
            events.append((step, _seconds(match.group(1))))
            break
    return events


def log_spans(text: str) -> dict[str, float | None]:
    """Epoch, swapping -> training (summed over buckets) and checkpoint seconds from the step lines."""
    events = step_events(text)
    first = {step: when for step, when in reversed(events)}
    last = dict(events)
    before_train, swap_at = 0.0, None
    for step, when in events:
        if step == "swap":
            swap_at = when
        elif step == "train" and swap_at is not None:
            before_train += _span(swap_at, when) or 0.0
            swap_at = None
    return {
        "epoch": _span(first.get("swap"), last.get("commit")),
        "swap_to_train": before_train if "train" in first else None,
        "checkpoint": _span(last.get("writing"), last.get("commit")),
    }


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


def _minus(total: float | None, *parts: float | None) -> float | None:
    return None if total is None else total - sum(p for p in parts if p is not None)


def epoch_breakdown(rows: list[dict], log_text: str) -> dict[str, object]:
    """Epoch seconds, its non-overlapping parts and their shares, and the engine's own counters."""
    spans = log_spans(log_text)
    epoch = spans["epoch"]
    load, eval_before = _total(rows, "timing", "load_edges"), _total(rows, "timing", "eval_before")
    parts: dict[str, float | None] = {
        "train": _total(rows, "timing", "train"),
        "partition_swap_step": _minus(spans["swap_to_train"], load, eval_before),
        "load_edges": load,
        "eval_before": eval_before,
        "progress_saves": _total(rows, "timing", "save"),
        "eval_after": _total(rows, "timing", "eval_after"),
        "checkpoint": spans["checkpoint"],
    }
    parts["other"] = _minus(epoch, *parts.values())
    wait_keys = sorted({k for row in rows for k in row.get("timing", {}) if "wait" in k})
    counters = {
        "io.seconds": _total(rows, "io", "seconds"),
        "io.background_seconds": _total(rows, "io", "background_seconds"),
        **{f"timing.{k}": _total(rows, "timing", k) for k in wait_keys},
    }
    return {
        "epoch_s": epoch,
        "swap_to_train_s": spans["swap_to_train"],  # beside PBG's per-bucket "io: S s"
        "seconds": parts,
        "share": {k: (v / epoch if v is not None and epoch else None) for k, v in parts.items()},
        "engine_counters": counters,
        "engine_counter_share": {k: (v / epoch if v is not None and epoch else None) for k, v in counters.items()},
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


PLAN_LINE = re.compile(
    r"memory plan: (?P<resident>\d+) of (?P<partitions>\d+) partitions resident \+ (?P<in_flight>\d+) in flight"
    r".*= (?P<total>[0-9.]+) GB of (?P<available>[0-9.]+) GB available"
)


def memory_plan(log_text: str) -> dict[str, object] | None:
    """The memory plan our ``pbg train`` logged: resident and in-flight slots, bound in bytes."""
    found = PLAN_LINE.search(log_text)
    if found is None:
        return None
    return {
        "resident": int(found["resident"]),
        "partitions": int(found["partitions"]),
        "in_flight": int(found["in_flight"]),
        "total_bytes": round(float(found["total"]) * 1e9),  # describe() prints decimal GB
        "available_bytes": round(float(found["available"]) * 1e9),
        "line": found[0],
    }
