"""What a training run's stats say, as plain data: bucket tables and a summary with its learning curve.

Pure formatting over ``training_stats.json`` rows (see :mod:`storage.stats_log`) and the
checkpoint's names (:mod:`storage.layout`): no I/O here, so every number can be checked by
hand in tests; :mod:`tasks.artifacts` posts the results as the Prefect UI's artifacts.

A bucket row's ``stats`` and ``eval_stats_*`` hold per-edge *means* with their edge
``count``, so means over several buckets are weighted by those counts (the value a
single bucket covering all those edges would show). Rows carrying
``eval_stats_chunk_avg`` are PBG's per-iteration eval summaries, not buckets: skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pbg_core.config import ConfigSchema
from pbg_core.evaluation.early_stopping import ValidationRow
from storage import layout, metric_labels
from storage.learning_curve import EpochPoint, best_epoch, curve_section, epoch_curve
from storage.report_numbers import Row, fmt, fmt_rate, get, number, rate, ratio, rounded, sig
from storage.stats_log import SUMMARY_KEY

TABLE_COLUMNS = (
    "bucket",
    "loss",
    metric_labels.MRR_BEFORE,
    metric_labels.MRR_AFTER,
    metric_labels.HITS10_BEFORE,
    metric_labels.HITS10_AFTER,
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
    count = number(get(row, "stats", "count"))
    train_s = number(timing.get("train"))
    io_bytes = [b for b in (number(io.get(k)) for k in ("bytes_read", "bytes_written")) if b is not None]
    times = [t for t in (number(v) for v in timing.values()) if t is not None]
    return {
        "bucket": f"({row.get('lhs_partition')}, {row.get('rhs_partition')})",
        "loss": sig(number(get(row, "stats", "metrics", "loss"))),
        metric_labels.MRR_BEFORE: ratio(get(row, "eval_stats_before", "metrics", "mrr")),
        metric_labels.MRR_AFTER: ratio(get(row, "eval_stats_after", "metrics", "mrr")),
        metric_labels.HITS10_BEFORE: ratio(get(row, "eval_stats_before", "metrics", "r10")),
        metric_labels.HITS10_AFTER: ratio(get(row, "eval_stats_after", "metrics", "r10")),
        "edges_per_s": rate(count, train_s),
        "io_mb": round(sum(io_bytes) / 1e6, 3) if io_bytes else None,
        "io_s": rounded(number(io.get("seconds")), 3),
        "seconds": rounded(sum(times), 3) if times else None,
        **({DISTRIBUTED_COLUMN: row["machine"]} if "machine" in row else {}),
    }


def validation_table(rows: Iterable[ValidationRow], best_version: int | None) -> list[dict[str, Any]]:
    """The validation table artifact: one row per validated version, the best one marked."""
    return [
        {
            "epoch": row.epoch,
            "version": row.version,
            "mrr": sig(row.mrr),
            "r1": sig(row.r1),
            "r10": sig(row.r10),
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
    extra_sections: Sequence[str] = (),
    validation: str | None = None,
    validation_rows: Sequence[ValidationRow] = (),
) -> str:
    """The run summary: where the checkpoint is, the best and the last epoch's metrics, config, learning curve.

    Never shows ``storage_options`` values (only whether the config sets any).

    Args:
        config: The run's config.
        version: The committed checkpoint version.
        total_iterations: Iterations of the whole schedule (epochs x edge paths x chunks).
        rows: Every stats row of the checkpoint (earlier runs included).
        extra_sections: Markdown sections placed after the checkpoint's, already rendered (a
            retraining run's gate and data: :mod:`storage.retraining.report`).
        validation: The validation line (the best version; why training stopped early), or None.
        validation_rows: The run's validations (drawn on the curve; they choose the best epoch).

    Returns:
        Markdown for Prefect's UI.
    """
    curve = epoch_curve(rows)
    name = checkpoint_basename(config.checkpoint_path)
    validated = f"## Validation\n\n{validation}\n\n{metric_labels.validation_definition(config)}"
    sections = [
        f"# PBG training: {name}",
        _checkpoint_section(config, version, total_iterations),
        *extra_sections,
        *([validated] if validation else []),
        _metrics_section(config, curve, validation_rows),
        _config_section(config),
        curve_section(f"Learning curve of {name}", curve, validation_rows, _validation_metric(config)),
    ]
    return "\n\n".join(sections) + "\n"


def _checkpoint_section(config: ConfigSchema, version: int, total_iterations: int) -> str:
    progress = version_progress(version, total_iterations).removeprefix(f"version {version} ")
    lines = ["## Checkpoint", "", f"- version **{version}** {progress}"]
    lines += [f"- `{url}`" for url in checkpoint_urls(config.checkpoint_path)]
    if version > 0:
        model_url = _join(checkpoint_urls(config.checkpoint_path)[-1], layout.model_file(version))
        lines.append(f"- model file: `{model_url}`")
    return "\n".join(lines)


def _metrics_section(config: ConfigSchema, curve: Sequence[EpochPoint], validation: Sequence[ValidationRow]) -> str:
    """The best epoch's and the last epoch's in-training figures side by side, and what they measure."""
    if not curve:
        return "## Metrics\n\nNo training stats recorded yet."
    best = best_epoch(curve, validation, _validation_metric(config))
    by_epoch = {p.epoch_idx + 1: p for p in curve}
    rows = [(f"last (epoch {curve[-1].epoch_idx + 1})", curve[-1])]
    if best is not None and best.epoch in by_epoch and best.epoch != curve[-1].epoch_idx + 1:
        rows.insert(0, (f"best (epoch {best.epoch})", by_epoch[best.epoch]))
    lines = [
        "## Metrics",
        "",
        f"| epoch | mean loss | {metric_labels.IN_TRAINING} | {metric_labels.IN_TRAINING_HITS} | "
        "train edges/s | bucket rows |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {label} | {fmt(p.loss)} | {fmt(p.mrr_after)} | {fmt(p.hits10_after)} | {fmt_rate(p.edges_per_s)} "
        f"| {p.buckets} |"
        for label, p in rows
    ]
    by = (f"validation {best.by}" if best.by else best.metric) if best is not None else ""
    chosen = f" The best epoch is the one of the highest {by}." if best is not None else ""
    return "\n".join([*lines, "", metric_labels.in_training_definition(config) + chosen])


def _validation_metric(config: ConfigSchema) -> str:
    """The metric ``best.json`` follows (``validation.metric``; ``mrr`` without validation)."""
    return config.validation.metric if config.validation is not None else "mrr"


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


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name
