"""When a finished bucket's progress becomes durable: the save points of a pass.

Saving a bucket's progress (:meth:`~pbg_core.session.engine.TrainingSession.finish_bucket`)
writes every resident partition trained since the last save, then the record naming them. With
partitions of a few MiB that costs nothing and happens after every bucket (a kill loses the
bucket in flight). With partitions of gigabytes, and several of them resident across buckets,
it would rewrite them after every bucket: 15 times the embeddings' size per epoch on a
LiveJournal-sized graph. So a bucket's progress is saved only when

- ``progress_interval`` is 0, or
- what would be written is small (:data:`CHEAP_SAVE_BYTES` or less), or
- the time since the last save point plus one more bucket like this one would pass
  ``progress_interval`` (a kill then loses at most about that much training), or
- it is the last bucket of the pass (its partitions go to the version's own files).

Partitions that leave memory between save points are still written when they leave; only the
record naming them waits for the next save point. Until then the finished buckets' stats rows
are held here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

CHEAP_SAVE_BYTES = 64 << 20  # a save this small costs well under a second: no reason to wait


@dataclass
class SavePoints:
    """The pass's save-point clock and the rows of buckets finished since the last save point.

    Attributes:
        interval: ``progress_interval`` in seconds (0: every bucket is a save point).
        last: ``time.monotonic()`` of the last save point (or of the pass's start).
        held: Stats rows of finished buckets not yet recorded, by bucket index.
    """

    interval: float
    last: float = field(default_factory=time.monotonic)
    held: dict[int, dict[str, Any]] = field(default_factory=dict)

    def restart(self) -> None:
        """A pass starts (or resumes): nothing held, the clock from now."""
        self.last = time.monotonic()
        self.held.clear()

    def due(self, dirty_bytes: int, bucket_seconds: float, last_bucket: bool) -> bool:
        """Whether the bucket just finished is a save point (see the module's rules)."""
        if last_bucket or self.interval == 0 or dirty_bytes <= CHEAP_SAVE_BYTES:
            return True
        return time.monotonic() - self.last + bucket_seconds >= self.interval

    def hold(self, row: dict[str, Any]) -> None:
        """Keep a finished bucket's row until the next save point (a retried step replaces it)."""
        self.held[row["index"]] = row

    def seconds_since(self) -> float:
        """Seconds since the last save point."""
        return time.monotonic() - self.last

    def take(self) -> list[dict[str, Any]]:
        """A save point is written: the held rows, in bucket order; the clock restarts."""
        rows = [self.held[index] for index in sorted(self.held)]
        self.restart()
        return rows
