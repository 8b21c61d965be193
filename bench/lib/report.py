"""What the benchmarks print and keep: fixed-width tables, ratios, verdicts, and result files
(bench/results/<name>.json, gitignored)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.lib.tools import RESULTS_DIR


def format_table(headers: list[str], rows: list[list[object]]) -> str:
    """Fixed-width text table; floats get 4 significant digits, None prints as ``-``."""

    def cell(value: object) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            # Large figures (edges/s, MiB) read best as grouped integers, small ones as 4 digits.
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
        return str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join([line, rule, *body])


def write_json(name: str, payload: dict[str, object]) -> Path:
    """Write ``payload`` to bench/results/<name>.json (atomic rename) and return the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)
    return path


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def mib(num_bytes: int | None) -> float | None:
    """Bytes to MiB (None stays None)."""
    return None if num_bytes is None else num_bytes / 2**20


def verdict(flag: bool | None) -> str:
    """``PASS``, ``FAIL``, or ``n/a`` when the figure behind the flag is missing."""
    return "n/a" if flag is None else ("PASS" if flag else "FAIL")
