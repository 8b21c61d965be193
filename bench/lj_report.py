"""The tables bench/livejournal.py prints: ours vs PBG 1.0.0, and where our epoch went.

A figure the run did not produce (a side skipped or failed, a field the engine does not record
yet) prints as ``n/a``, never as a guess.
"""

from __future__ import annotations

from _common import format_table, ratio

NA = "n/a"


def _get(record: dict | None, *keys: str) -> object:
    """``record[k1][k2]...`` or None when any level is missing."""
    value: object = record
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _gib(num: object) -> object:
    return num / 2**30 if isinstance(num, int | float) else None


def _na(value: object) -> object:
    return NA if value is None else value


def side_rows(payload: dict) -> list[list[object]]:
    """One row per figure: ours, PBG 1.0.0, ours/PBG where both exist."""
    ours, pbg, imp = payload.get("ours"), payload.get("pbg"), payload.get("import")
    ours_eps, pbg_eps = _get(ours, "throughput", "edges_per_s"), _get(pbg, "throughput", "edges_per_s")
    written = _get(ours, "command", "write_bytes")
    minimum = payload.get("minimum_bytes_written")
    rows = [
        ["import wall (s)", _get(imp, "wall_s"), None, None],
        ["train command wall (s)", _get(ours, "command", "wall_s"), _get(pbg, "command", "wall_s"), None],
        ["epoch (s)", _get(ours, "epoch", "epoch_s"), None, None],
        ["buckets trained", _get(ours, "throughput", "buckets"), _get(pbg, "throughput", "buckets"), None],
        ["edges trained", _get(ours, "throughput", "edges"), _get(pbg, "throughput", "edges"), None],
        ["compute (s)", _get(ours, "throughput", "compute_s"), _get(pbg, "throughput", "compute_s"), None],
        ["bucket start -> training (s)", _get(ours, "epoch", "swap_to_train_s"), _get(pbg, "throughput", "io_s"), None],
        ["train edges/s", ours_eps, pbg_eps, ratio(ours_eps, pbg_eps)],
        [
            "peak tree RSS (GiB)",
            _gib(_get(ours, "command", "peak_rss_bytes")),
            _gib(_get(pbg, "command", "peak_rss_bytes")),
            None,
        ],
        [
            "peak tree PSS (GiB)",
            _gib(_get(ours, "command", "peak_pss_bytes")),
            _gib(_get(pbg, "command", "peak_pss_bytes")),
            None,
        ],
        ["memory plan (GiB)", _gib(_get(ours, "memory_plan_bytes")), None, None],
        ["bytes written (GiB)", _gib(written), _gib(_get(pbg, "command", "write_bytes")), None],
        ["minimum bytes (GiB)", _gib(minimum), None, None],
        ["written / minimum", ratio(written, minimum), None, None],
        ["MRR (sampled)", _get(payload, "eval", "mrr"), None, None],
        ["Hits@10 (sampled)", _get(payload, "eval", "hits10"), None, None],
    ]
    return [[name, *(_na(v) for v in values)] for name, *values in rows]


def epoch_rows(payload: dict) -> list[list[object]]:
    """Seconds and share of our epoch per part, then the engine's own counters (n/a: not recorded)."""
    epoch = _get(payload, "ours", "epoch") or {}
    seconds, share = epoch.get("seconds", {}), epoch.get("share", {})
    rows = [[part, _na(seconds.get(part)), _na(share.get(part))] for part in seconds]
    rows.append(["epoch", _na(epoch.get("epoch_s")), 1.0 if epoch.get("epoch_s") else NA])
    counters, counter_share = epoch.get("engine_counters", {}), epoch.get("engine_counter_share", {})
    rows += [[f"({name}, not in the sum)", _na(v), _na(counter_share.get(name))] for name, v in counters.items()]
    return rows


def print_report(payload: dict) -> None:
    """Print the two tables and the notes the figures need."""
    print()
    print(format_table(["figure", "ours", "PBG 1.0.0", "ours/PBG"], side_rows(payload)))
    print()
    print(format_table(["our epoch", "seconds", "share"], epoch_rows(payload)))
    notes = [
        f"eval: {_get(payload, 'eval', 'reason')}" if _get(payload, "eval", "reason") else None,
        f"eval failed:\n{_get(payload, 'eval', 'command', 'stderr_tail')}"
        if _get(payload, "eval", "status") == "failed" and _get(payload, "eval", "command", "stderr_tail")
        else None,
        "import wall: from the earlier run that made this import (cached)"
        if _get(payload, "import", "cached")
        else None,
        "bytes written: " + str(_get(payload, "ours", "command", "write_bytes_method")),
        f"PBG stopped: {_get(payload, 'pbg', 'command', 'signals')}; finished its epoch: "
        f"{_get(payload, 'pbg', 'finished_epoch')}; left running afterwards (killed): "
        f"{_get(payload, 'pbg', 'command', 'leftovers')}"
        if payload.get("pbg")
        else None,
        "load-ahead / save-behind: this engine records neither io.background_seconds nor a timing key with 'wait'"
        if _get(payload, "ours", "epoch", "engine_counters", "io.background_seconds") is None
        and _get(payload, "ours", "epoch") is not None
        else None,
    ]
    for note in notes:
        if note:
            print(f"note: {note}")
