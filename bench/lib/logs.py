"""The log lines the benchmarks read, written once: ours, the engine's step lines in them, and PBG 1.0.0's.

Ours (Prefect's console format): ``HH:MM:SS.mmm | LEVEL   | source - message``, where the source
is a logger name (``pbg_core.session.engine``) or, for lines relayed from a flow or task run,
``Flow run 'name'`` / ``Task run 'name'``. :data:`LOG_LINE` matches every such line: ``clock``,
``level``, ``rest`` (source and message) and, when the source is one word (a logger name),
``logger`` and ``message``; otherwise ``logger`` is None and ``message`` is the whole rest. The
clock has no date and no time zone (local time): :func:`clock_time` puts it on the day nearest
to a known moment.

The engine's step lines (logger ``pbg_core.session.engine``), as patterns of the message:
``bucket (l, r) (i of n): swapping partitions``, ``bucket (l, r): training N edges on W
workers`` (right before the first batch), ``bucket (l, r): trained N edges in T s`` (right after
the last), ``writing checkpoint version V``, ``committing version V``.

PBG 1.0.0 logs ``YYYY-MM-DD HH:MM:SS,mmm  [Trainer-0] ( l , r ): bucket i / n : Processed N edges
in T s ( X M/sec ); io: S s ( Y MB/sec )`` per bucket (:data:`PBG_PROCESSED`: ``N``, ``T`` and,
when present, ``S``), ``( l , r ): Loading entities`` before a bucket's embeddings load, and
``Switching to the new checkpoint version`` at a commit.
"""

from __future__ import annotations

import datetime as dt
import re

LOG_LINE = re.compile(
    r"^(?P<clock>\d{2}:\d{2}:\d{2}\.\d{3}) \| *(?P<level>[A-Z]+) *\| "
    r"(?P<rest>(?:(?P<logger>\S+) - )?(?P<message>.*))$"
)
SWAPPING = re.compile(r"bucket \((\d+), (\d+)\) \((\d+) of (\d+)\): swapping partitions")
TRAINING = re.compile(r"bucket \((\d+), (\d+)\): training (\d+) edges on (\d+) workers")
TRAINED = re.compile(r"bucket \((\d+), (\d+)\): trained (\d+) edges in ([0-9.]+) s")
WRITING = re.compile(r"writing checkpoint version (\d+)")
COMMITTING = re.compile(r"committing version (\d+)")

PBG_LINE = re.compile(r"^(?P<stamp>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3})\s+(?P<message>.*)$")
PBG_PROCESSED = re.compile(r"Processed (\d+) edges in ([0-9.]+) s(?: .*?io: ([0-9.]+) s)?")
PBG_BUCKET_START = re.compile(r"\(\s*\d+\s*,\s*\d+\s*\): Loading entities")
PBG_COMMIT = "Switching to the new checkpoint version"

_HALF_DAY = dt.timedelta(hours=12)


def clock_time(stamp: str, near: float) -> float:
    """Epoch seconds of a dateless local ``HH:MM:SS.mmm``, on the day that puts it within 12 hours of ``near``."""
    anchor = dt.datetime.fromtimestamp(near)
    when = dt.datetime.combine(anchor.date(), dt.datetime.strptime(stamp, "%H:%M:%S.%f").time())
    if when < anchor - _HALF_DAY:
        when += dt.timedelta(days=1)
    elif when > anchor + _HALF_DAY:
        when -= dt.timedelta(days=1)
    return when.timestamp()


def pbg_time(stamp: str) -> float:
    """Epoch seconds of PBG 1.0.0's ``YYYY-MM-DD HH:MM:SS,mmm`` (local time)."""
    return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def pbg_buckets(text: str) -> list[tuple[int, float, float | None]]:
    """(edges, compute seconds, io seconds or None) of every PBG 1.0.0 ``Processed`` line, in log order."""
    return [
        (int(m.group(1)), float(m.group(2)), float(m.group(3)) if m.group(3) is not None else None)
        for m in PBG_PROCESSED.finditer(text)
    ]
