"""Where a whole `train` command's time goes, read from each tool's log timestamps.

A timeline is the list of per-bucket training intervals (wall-clock start and end, edges and
the tool's own compute seconds) plus the last checkpoint commit marker. From it and the
command's spawn time and wall time, ``phases`` splits the run into
``start-up + training + gaps + tail``: spawn -> first training start, the buckets' training,
the gaps between one bucket's training end and the next one's start (every bucket is one
iteration in the benchmark's 1-partition configs), and last training end -> exit (``tail``;
``shutdown`` is its part after the last commit marker).

Markers, by tool:
- PBG 1.0.0 logs ``YYYY-MM-DD HH:MM:SS,mmm  [Trainer-0] ( l , r ): bucket i / n : Processed N
  edges in T s ...`` right after its HOGWILD ``map_async`` returns, and takes ``T`` from a
  ``time.time()`` read right before it, so training starts at that line's time minus ``T``
  (the last INFO line before the first batch, ``( l , r ): Loading entities``, comes before
  the embeddings and edges are loaded; it is kept as ``first_bucket_marker``). Commit:
  ``Switching to the new checkpoint version``.
- ours (logger ``pbg_core.session.engine``, ``HH:MM:SS.mmm | LEVEL | name - message``): ``bucket (l, r):
  training N edges on W workers`` right before the first batch and ``bucket (l, r): trained N
  edges in T s`` right after the last. Without the first, the start is the end minus ``T``.
  Commit: ``committing version V`` (optional: None when the line is absent).

Log times have no time zone (both tools use local time, as ``time.localtime``) and ours have no
date: a clock time is placed on the day that puts it within 12 hours of the spawn.
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from dataclasses import dataclass, field

_PBG_LINE = re.compile(r"^(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3})\s+(.*)$")
_PBG_PROCESSED = re.compile(r"Processed (\d+) edges in ([0-9.]+) s")
_PBG_BUCKET_START = re.compile(r"\(\s*\d+\s*,\s*\d+\s*\): Loading entities")
_PBG_COMMIT = "Switching to the new checkpoint version"

_OURS_LINE = re.compile(r"^(\d{2}:\d{2}:\d{2}\.\d{3}) \|(.*)$")
_OURS_START = re.compile(r"bucket \((\d+), (\d+)\): training (\d+) edges on (\d+) workers")
_OURS_END = re.compile(r"bucket \((\d+), (\d+)\): trained (\d+) edges in ([0-9.]+) s")
_OURS_COMMIT = re.compile(r"committing version (\d+)")
_HALF_DAY = dt.timedelta(hours=12)


@dataclass(frozen=True)
class Interval:
    """One bucket's training: wall-clock start/end (epoch seconds), edges, own compute seconds."""

    start: float
    end: float
    edges: int
    seconds: float


@dataclass
class Timeline:
    """What a log says about a run: training intervals in order, markers, parse notes."""

    intervals: list[Interval] = field(default_factory=list)
    last_commit: float | None = None
    first_bucket_marker: float | None = None
    notes: list[str] = field(default_factory=list)


def _pbg_time(stamp: str) -> float:
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _clock_time(stamp: str, spawn: float) -> float:
    """Epoch seconds of a dateless local ``HH:MM:SS.mmm``, on the day nearest to ``spawn``."""
    near = dt.datetime.fromtimestamp(spawn)
    clock = dt.datetime.strptime(stamp, "%H:%M:%S.%f").time()
    when = dt.datetime.combine(near.date(), clock)
    if when < near - _HALF_DAY:
        when += dt.timedelta(days=1)
    elif when > near + _HALF_DAY:
        when -= dt.timedelta(days=1)
    return when.timestamp()


def parse_pbg(text: str) -> Timeline:
    """Timeline of a ``torchbiggraph_train`` log (its stdout)."""
    timeline = Timeline()
    for line in text.splitlines():
        match = _PBG_LINE.match(line)
        if not match:
            continue
        when, message = _pbg_time(match.group(1)), match.group(2)
        if processed := _PBG_PROCESSED.search(message):
            seconds = float(processed.group(2))
            timeline.intervals.append(Interval(when - seconds, when, int(processed.group(1)), seconds))
        elif _PBG_BUCKET_START.search(message) and timeline.first_bucket_marker is None:
            timeline.first_bucket_marker = when
        elif _PBG_COMMIT in message:
            timeline.last_commit = when
    if not timeline.intervals:
        timeline.notes.append("no 'Processed N edges in T s' line in PBG's log")
    return timeline


def parse_ours(text: str, spawn: float) -> Timeline:
    """Timeline of a ``pbg train`` log (stdout and stderr), clock times placed near ``spawn``."""
    timeline = Timeline()
    open_start: dict[tuple[str, str], float] = {}
    derived = 0
    for line in text.splitlines():
        match = _OURS_LINE.match(line)
        if not match:
            continue
        message = match.group(2)
        if start := _OURS_START.search(message):
            when = _clock_time(match.group(1), spawn)
            open_start[start.group(1, 2)] = when
            if timeline.first_bucket_marker is None:
                timeline.first_bucket_marker = when
        elif end := _OURS_END.search(message):
            when, seconds = _clock_time(match.group(1), spawn), float(end.group(4))
            began = open_start.pop(end.group(1, 2), None)
            if began is None:
                began, derived = when - seconds, derived + 1
            timeline.intervals.append(Interval(began, when, int(end.group(3)), seconds))
        elif _OURS_COMMIT.search(message):
            timeline.last_commit = _clock_time(match.group(1), spawn)
    if derived:
        timeline.notes.append(
            f"{derived} 'trained' line(s) without a 'training N edges on W workers' line before them: start = end - T"
        )
    if not timeline.intervals:
        timeline.notes.append("no 'bucket (l, r): trained N edges in T s' line from pbg_core.session.engine")
    if timeline.last_commit is None:
        timeline.notes.append("no 'committing version V' line: shutdown after the last commit unknown")
    return timeline


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def phases(timeline: Timeline, spawn: float, wall_s: float, training_s: float | None = None) -> dict[str, object]:
    """Split a run's wall time along its timeline (seconds; None where a marker is missing).

    Args:
        timeline: The parsed log.
        spawn: Wall clock at spawn (epoch seconds).
        wall_s: Spawn -> exit.
        training_s: The tool's own total compute seconds if known more precisely than the log's
            rounded ``T`` (ours: training_stats.json); else the sum of the intervals' ``T``.

    Returns:
        ``startup_s`` (spawn -> first training start), ``training_s``, ``iterations``,
        ``gaps_s`` (each end -> next start), ``gap_median_s``, ``gap_mean_s``, ``gaps_total_s``,
        ``tail_s`` (last training end -> exit), ``shutdown_s`` (last commit -> exit, when the
        commit marker follows the last training), ``other_s`` (wall minus the four parts: the
        log lines' distance from each tool's own timer), ``first_bucket_marker_s``.
    """
    intervals = timeline.intervals
    if not intervals:
        return {
            "startup_s": None,
            "training_s": training_s,
            "iterations": 0,
            "gaps_s": [],
            "gap_median_s": None,
            "gap_mean_s": None,
            "gaps_total_s": None,
            "tail_s": None,
            "shutdown_s": None,
            "other_s": None,
            "first_bucket_marker_s": None,
        }
    exit_at = spawn + wall_s
    gaps = [later.start - earlier.end for earlier, later in zip(intervals, intervals[1:], strict=False)]
    training = training_s if training_s is not None else sum(i.seconds for i in intervals)
    startup, tail = intervals[0].start - spawn, exit_at - intervals[-1].end
    commit = timeline.last_commit
    marker = timeline.first_bucket_marker
    return {
        "startup_s": startup,
        "training_s": training,
        "iterations": len(intervals),
        "gaps_s": gaps,
        "gap_median_s": _median(gaps),
        "gap_mean_s": statistics.fmean(gaps) if gaps else None,
        "gaps_total_s": sum(gaps),
        "tail_s": tail,
        "shutdown_s": exit_at - commit if commit is not None and commit >= intervals[-1].end else None,
        "other_s": wall_s - startup - training - sum(gaps) - tail,
        "first_bucket_marker_s": marker - spawn if marker is not None else None,
    }
