"""Progress of an import as a fraction of the whole, from the engine's per-phase counts.

The engine reports ``(phase, count)``: lines read while ``counting`` (pass 1), then edges
mapped while ``writing`` (pass 2). Pass 1's total is unknown until it ends, so it is
estimated from the inputs' sizes and the bytes per line of the first input's head; pass 2's
total is what pass 1 counted. Counting fills the first half of the bar, writing the second.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from storage.errors import StorageError
from storage.fs.urls import resolve, translate_errors

HEAD_BYTES = 1 << 16
_NOT_TEXT = (".gz", ".bz2", ".parquet", ".pq")


def estimate_lines(inputs: Sequence[str], storage_options: dict[str, Any] | None = None) -> int | None:
    """Lines in ``inputs`` estimated from their sizes and the first input's head; None if unknown.

    Compressed and Parquet inputs are not estimated: their size says little about lines.
    """
    if not inputs or any(url.lower().endswith(_NOT_TEXT) for url in inputs):
        return None
    try:
        total = 0
        for url in inputs:
            filesystem, path = resolve(url, storage_options)
            with translate_errors(url):  # botocore's errors are no OSError: a hint must not raise them
                total += int(filesystem.size(path))
        filesystem, path = resolve(inputs[0], storage_options)
        with translate_errors(inputs[0]), filesystem.open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except (OSError, StorageError):  # the import itself reports what is wrong
        return None
    lines = head.count(b"\n")
    return max(1, round(total * lines / len(head))) if lines else None


@dataclass
class ImportProgress:
    """Turns ``(phase, count)`` calls into ``report(fraction, text)`` at most every ``every_s``.

    Attributes:
        estimated_lines: Pass 1's estimated total (None: the bar waits at 0 until pass 2).
        report: Receives the fraction done (0..1) and a line such as
            ``"writing: 1,200,000 of 10,000,000 edges (1,050,000/s)"``.
        every_s: Least time between two reports (a phase's first call always reports).
    """

    estimated_lines: int | None
    report: Callable[[float, str], None]
    every_s: float = 2.0
    counted: int = 0
    _phase: str = field(default="", repr=False)
    _phase_started: float = field(default=0.0, repr=False)
    _last: float = field(default=0.0, repr=False)

    def __call__(self, phase: str, count: int) -> None:
        now = time.monotonic()
        if phase != self._phase:
            self._phase, self._phase_started, self._last = phase, now, 0.0
        if phase == "counting":
            self.counted = count
            total = max(self.estimated_lines or 0, count) or None
            fraction = 0.5 * count / total if total and self.estimated_lines else 0.0
        else:
            total = max(self.counted, count, 1)
            fraction = 0.5 + 0.5 * count / total
        if self._last and now - self._last < self.every_s:
            return
        self._last = now
        rate = count / max(now - self._phase_started, 1e-3)
        of = f" of ~{total:,}" if total and (phase != "counting" or self.estimated_lines) else ""
        unit = "lines" if phase == "counting" else "edges"
        self.report(min(fraction, 1.0), f"{phase}: {count:,}{of} {unit} ({rate:,.0f}/s)")
