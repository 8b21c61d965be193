"""What a training run's stats say, as plain data: bucket tables, the learning curve, a summary.

Pure formatting over ``training_stats.json`` rows (see :mod:`storage.stats_log`) and the
checkpoint's names (:mod:`storage.layout`): no I/O here, so every number can be checked by
hand in tests; :mod:`tasks.artifacts` posts the results as the Prefect UI's artifacts.

A bucket row's ``stats`` and ``eval_stats_*`` hold per-edge *means* with their edge
``count``, so means over several buckets are weighted by those counts (the value a
single bucket covering all those edges would show). Rows carrying
``eval_stats_chunk_avg`` are PBG's per-iteration eval summaries, not buckets: skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pbg_core.config import ConfigSchema
from pbg_core.evaluation.early_stopping import ValidationRow
from storage import layout
from storage.stats_log import SUMMARY_KEY

Row = Mapping[str, Any]

SPARK_LEVELS = "▁▂▃▄▅▆▇█"
_MISSING = "–"  # noqa: RUF001 - an en dash on purpose: the tables' placeholder for a missing value

TABLE_COLUMNS = (
    "bucket",
    "loss",
    "mrr_before",
    "mrr_after",
    "hits10_before",
    "hits10_after",
    "edges_per_s",
    "io_mb",
    "io_s",
    "seconds",
)
DISTRIBUTED_COLUMN = "worker"  # after TABLE_COLUMNS in a distributed run's rows: the Dask worker that trained it


# ---- per-iteration table ------------------------------------------------------------------
def iteration_table(rows: Iterable[Row | None]) -> list[dict[str, Any]]:
    """One table row per bucket row (``None`` entries and summary rows skipped), in order.

    Args:
        rows: Stats rows as written to ``training_stats.json`` (``finish_bucket``'s ``row``).

    Returns:
        Dicts with the keys of :data:`TABLE_COLUMNS` (and :data:`DISTRIBUTED_COLUMN` for a
        distributed run's rows); a value that is missing or not finite
        is ``None`` (an empty cell in Prefect's table).
    """
    return [bucket_table_row(row) for row in rows if row is not None and SUMMARY_KEY not in row]


def bucket_table_row(row: Row) -> dict[str, Any]:
    """The table row of one bucket's stats row (see :func:`iteration_table`)."""
    timing = row.get("timing") or {}
    io = row.get("io") or {}
    count = _number(_get(row, "stats", "count"))
    train_s = _number(timing.get("train"))
    io_bytes = [b for b in (_number(io.get(k)) for k in ("bytes_read", "bytes_written")) if b is not None]
    times = [t for t in (_number(v) for v in timing.values()) if t is not None]
    return {
        "bucket": f"({row.get('lhs_partition')}, {row.get('rhs_partition')})",
        "loss": _sig(_number(_get(row, "stats", "metrics", "loss"))),
        "mrr_before": _ratio(_get(row, "eval_stats_before", "metrics", "mrr")),
        "mrr_after": _ratio(_get(row, "eval_stats_after", "metrics", "mrr")),
        "hits10_before": _ratio(_get(row, "eval_stats_before", "metrics", "r10")),
        "hits10_after": _ratio(_get(row, "eval_stats_after", "metrics", "r10")),
        "edges_per_s": _rate(count, train_s),
        "io_mb": round(sum(io_bytes) / 1e6, 3) if io_bytes else None,
        "io_s": _round(_number(io.get("seconds")), 3),
        "seconds": _round(sum(times), 3) if times else None,
        **({DISTRIBUTED_COLUMN: row["machine"]} if "machine" in row else {}),
    }


# ---- learning curve -----------------------------------------------------------------------
@dataclass(frozen=True)
class EpochPoint:
    """Count-weighted means of one epoch's bucket rows (``None`` when nothing measured it)."""

    epoch_idx: int
    buckets: int
    loss: float | None
    mrr_after: float | None
    hits10_after: float | None
    edges_per_s: float | None


def epoch_curve(rows: Iterable[Row]) -> list[EpochPoint]:
    """Group bucket rows by ``epoch_idx`` (summary rows skipped), in epoch order.

    Rows of every edge path and chunk of an epoch, from this run and earlier ones, count.
    """
    groups: dict[int, list[Row]] = {}
    for row in rows:
        if SUMMARY_KEY in row or not isinstance(row.get("epoch_idx"), int):
            continue
        groups.setdefault(row["epoch_idx"], []).append(row)
    return [_epoch_point(epoch, groups[epoch]) for epoch in sorted(groups)]


def _epoch_point(epoch: int, rows: Sequence[Row]) -> EpochPoint:
    train_s = [_number((row.get("timing") or {}).get("train")) for row in rows]
    counts = [_number(_get(row, "stats", "count")) for row in rows]
    timed = [(c, s) for c, s in zip(counts, train_s, strict=True) if c is not None and s is not None]
    return EpochPoint(
        epoch_idx=epoch,
        buckets=len(rows),
        loss=_weighted_mean(rows, "stats", "loss"),
        mrr_after=_weighted_mean(rows, "eval_stats_after", "mrr"),
        hits10_after=_weighted_mean(rows, "eval_stats_after", "r10"),
        edges_per_s=_rate(sum(c for c, _ in timed), sum(s for _, s in timed)) if timed else None,
    )


def _weighted_mean(rows: Sequence[Row], section: str, metric: str) -> float | None:
    """Mean of ``section.metrics[metric]`` over rows, weighted by ``section.count``."""
    total = weight = 0.0
    for row in rows:
        count, value = _number(_get(row, section, "count")), _number(_get(row, section, "metrics", metric))
        if count and value is not None:
            total += count * value
            weight += count
    return total / weight if weight > 0 else None


def sparkline(values: Sequence[float | None]) -> str:
    """One block character per value, ``▁`` at the series' minimum to ``█`` at its maximum.

    A flat series is drawn at mid height (``▄``); a missing value is a space.
    """
    present = [v for v in values if v is not None]
    if not present:
        return " " * len(values)
    low, high = min(present), max(present)
    top = len(SPARK_LEVELS) - 1
    chars = []
    for value in values:
        if value is None:
            chars.append(" ")
        elif high == low:
            chars.append(SPARK_LEVELS[top // 2])
        else:
            chars.append(SPARK_LEVELS[round((value - low) / (high - low) * top)])
    return "".join(chars)


def validation_table(rows: Iterable[ValidationRow], best_version: int | None) -> list[dict[str, Any]]:
    """The validation table artifact: one row per validated version, the best one marked."""
    return [
        {
            "epoch": row.epoch,
            "version": row.version,
            "mrr": _sig(row.mrr),
            "r1": _sig(row.r1),
            "r10": _sig(row.r10),
            "count": row.count,
            "sampled": "yes" if row.sampled else "no",
            "best": "✓" if row.version == best_version else "",
        }
        for row in rows
    ]


# ---- final markdown -----------------------------------------------------------------------
def version_progress(version: int, total_iterations: int) -> str:
    """``version 3 (3 of 5 iterations done)``: a checkpoint's version against the config's schedule.

    A version counts committed iterations (epochs x edge paths x edge chunks), not epochs; a
    checkpoint trained by a longer schedule is past this config's, and says so rather than
    "version 5 of 3".
    """
    if version > total_iterations:
        return f"version {version} (past this config's {total_iterations} iteration(s): nothing left to train)"
    return f"version {version} ({version} of {total_iterations} iteration(s) done)"


def summary_markdown(
    config: ConfigSchema,
    version: int,
    total_iterations: int,
    rows: Sequence[Row],
    gate: dict[str, Any] | None = None,
    validation: str | None = None,
) -> str:
    """The run summary: where the checkpoint is, last epoch's metrics, config, learning curve.

    Never shows ``storage_options`` values (only whether the config sets any).

    Args:
        config: The run's config.
        version: The committed checkpoint version.
        total_iterations: Iterations of the whole schedule (epochs x edge paths x chunks).
        rows: Every stats row of the checkpoint (earlier runs included).
        gate: A retraining run's ``retrain.json`` after its quality gate (:mod:`storage.retraining.state`).
        validation: The validation line (the best version; why training stopped early), or None.

    Returns:
        Markdown for Prefect's UI.
    """
    curve = epoch_curve(rows)
    sections = [
        f"# PBG training: {checkpoint_basename(config.checkpoint_path)}",
        _checkpoint_section(config, version, total_iterations),
        *([gate_section(gate)] if gate else []),
        *([f"## Validation\n\n{validation}"] if validation else []),
        _metrics_section(curve[-1] if curve else None),
        _config_section(config),
        _curve_section(curve),
    ]
    return "\n\n".join(sections) + "\n"


def gate_section(gate: dict[str, Any]) -> str:
    """The quality gate: the previous and the new model on the holdout, and the verdict."""
    verdict = "**passed**: promoted to latest.json" if gate.get("gate") == "passed" else "**FAILED**: not promoted"
    lines = ["## Quality gate", "", f"{verdict}. {gate.get('reason', '')}", ""]
    lines += ["| model | holdout MRR | Hits@10 | edges |", "|---|---|---|---|"]
    for label, key in (("previous run (grown)", "baseline"), ("this run", "trained")):
        figures = gate.get(key) or {}
        lines.append(
            f"| {label} | {_fmt(figures.get('mrr'))} | {_fmt(figures.get('r10'))} | {figures.get('count', '-')} |"
        )
    lines += [
        "",
        f"New generations {gate.get('new_generations')}; holdouts: "
        + ", ".join(f"`{h}`" for h in gate.get("holdouts", [])),
    ]
    return "\n".join(lines)


def _checkpoint_section(config: ConfigSchema, version: int, total_iterations: int) -> str:
    progress = version_progress(version, total_iterations).removeprefix(f"version {version} ")
    lines = ["## Checkpoint", "", f"- version **{version}** {progress}"]
    lines += [f"- `{url}`" for url in checkpoint_urls(config.checkpoint_path)]
    if version > 0:
        model_url = _join(checkpoint_urls(config.checkpoint_path)[-1], layout.model_file(version))
        lines.append(f"- model file: `{model_url}`")
    return "\n".join(lines)


def _metrics_section(last: EpochPoint | None) -> str:
    if last is None:
        return "## Metrics\n\nNo training stats recorded yet."
    return "\n".join(
        [
            f"## Metrics (epoch {last.epoch_idx + 1}, {last.buckets} bucket row(s))",
            "",
            "| mean loss | mean MRR (after) | mean Hits@10 (after) | train edges/s |",
            "|---|---|---|---|",
            f"| {_fmt(last.loss)} | {_fmt(last.mrr_after)} | {_fmt(last.hits10_after)} "
            f"| {_fmt_rate(last.edges_per_s)} |",
        ]
    )


def _config_section(config: ConfigSchema) -> str:
    entities = ", ".join(f"`{name}` ({e.num_partitions} partition(s))" for name, e in config.entities.items())
    relations = ", ".join(f"`{r.name}` ({r.lhs} → {r.rhs}, {r.operator})" for r in config.relations)
    workers = config.workers if config.workers is not None else "auto (usable CPU cores)"
    lines = [
        "## Config",
        "",
        f"- entity types: {entities}",
        f"- relations: {relations}",
        f"- dimension {config.dimension} · comparator `{config.comparator}` · "
        f"loss_fn `{config.loss_fn}` · lr {config.lr:g}",
        f"- num_epochs {config.num_epochs} · workers {workers} · bucket_order `{config.bucket_order}`",
    ]
    if config.storage_options is not None:
        lines.append("- storage_options: set (values not shown)")
    return "\n".join(lines)


def _curve_section(curve: Sequence[EpochPoint]) -> str:
    if not curve:
        return "## Learning curve\n\nNo epochs recorded yet."
    losses, mrrs = [p.loss for p in curve], [p.mrr_after for p in curve]
    lines = ["## Learning curve", "", "| epoch | mean loss | mean MRR (after) |", "|---|---|---|"]
    lines += [f"| {p.epoch_idx + 1} | {_fmt(p.loss)} | {_fmt(p.mrr_after)} |" for p in curve]
    lines += ["", f"- loss `{sparkline(losses)}`", f"- MRR (after) `{sparkline(mrrs)}`"]
    return "\n".join(lines)


# ---- names ----------------------------------------------------------------------------------
def checkpoint_basename(checkpoint_path: str) -> str:
    """The last path component of a checkpoint path or URL (``s3://b/runs/ckpt/`` -> ``ckpt``)."""
    stripped = checkpoint_path.rstrip("/")
    return stripped.rsplit("/", 1)[-1] or stripped


def checkpoint_urls(checkpoint_path: str) -> list[str]:
    """The checkpoint location as a local path and as a ``file://`` URL (one entry for remote URLs)."""
    if checkpoint_path.startswith("file://"):
        return [unquote(checkpoint_path[len("file://") :]), checkpoint_path]
    if "://" in checkpoint_path:
        return [checkpoint_path]
    absolute = Path(checkpoint_path).absolute()
    return [str(absolute), absolute.as_uri()]


# ---- numbers ------------------------------------------------------------------------------
def _get(row: Row, *keys: str) -> Any:
    value: Any = row
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _number(value: Any) -> float | None:
    """``value`` as a finite float, else None (missing, NaN, inf or not a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _sig(value: float | None, digits: int = 4) -> float | None:
    """Round to ``digits`` significant digits (losses span orders of magnitude)."""
    return None if value is None else float(f"{value:.{digits}g}")


def _ratio(value: Any) -> float | None:
    """A metric in [0, 1] (MRR, Hits@k) to 4 decimals."""
    return _round(_number(value), 4)


def _rate(count: float | None, seconds: float | None) -> float | None:
    """Edges per second to 1 decimal; None without a positive duration."""
    if count is None or seconds is None or seconds <= 0:
        return None
    return round(count / seconds, 1)


def _fmt(value: float | None) -> str:
    return _MISSING if value is None else f"{value:.4g}"


def _fmt_rate(value: float | None) -> str:
    return _MISSING if value is None else f"{value:,.0f}"


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name
