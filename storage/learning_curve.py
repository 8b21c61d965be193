"""The learning curve of a run: per-epoch means of its stats rows, the best epoch, and its drawing.

Pure (no I/O): :func:`epoch_curve` groups ``training_stats.json`` rows (:mod:`storage.stats_log`)
by epoch; :func:`best_epoch` picks the epoch a person should look at (the highest in-training MRR,
or the best validated epoch when the run validates); :func:`curve_section` is the summary's
"Learning curve" markdown: the chart (:mod:`storage.svg_chart`) as a ``data:image/svg+xml``
image, one sentence comparing the best epoch with the last, and every epoch's figures folded in
a ``<details>`` block (a 2,000-epoch run's table does not push the rest of the summary away).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pbg_core.evaluation.early_stopping import ValidationRow, best_of
from storage import metric_labels
from storage.report_numbers import Row, fmt, get, number, rate
from storage.stats_log import SUMMARY_KEY
from storage.svg_chart import Marker, Panel, Series, chart, data_uri

DROP_HINT = 0.2  # the last epoch this far below the best: the summary suggests validation + early stopping
LOSS_COLOR, MRR_COLOR, VALIDATION_COLOR = "#1f77b4", "#d62728", "#2ca02c"


@dataclass(frozen=True)
class EpochPoint:
    """Count-weighted means of one epoch's bucket rows (``None`` when nothing measured it)."""

    epoch_idx: int
    buckets: int
    loss: float | None
    mrr_after: float | None
    hits10_after: float | None
    edges_per_s: float | None


@dataclass(frozen=True)
class Best:
    """The best epoch (counted from 1), its MRR and that MRR's name (:mod:`storage.metric_labels`).

    ``by`` is the validation metric that chose it when it is not the MRR (``r1``, ``r10``), else None.
    """

    epoch: int
    mrr: float
    metric: str
    by: str | None = None


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
    train_s = [number((row.get("timing") or {}).get("train")) for row in rows]
    counts = [number(get(row, "stats", "count")) for row in rows]
    timed = [(c, s) for c, s in zip(counts, train_s, strict=True) if c is not None and s is not None]
    return EpochPoint(
        epoch_idx=epoch,
        buckets=len(rows),
        loss=_weighted_mean(rows, "stats", "loss"),
        mrr_after=_weighted_mean(rows, "eval_stats_after", "mrr"),
        hits10_after=_weighted_mean(rows, "eval_stats_after", "r10"),
        edges_per_s=rate(sum(c for c, _ in timed), sum(s for _, s in timed)) if timed else None,
    )


def _weighted_mean(rows: Sequence[Row], section: str, metric: str) -> float | None:
    """Mean of ``section.metrics[metric]`` over rows, weighted by ``section.count``."""
    total = weight = 0.0
    for row in rows:
        count, value = number(get(row, section, "count")), number(get(row, section, "metrics", metric))
        if count and value is not None:
            total += count * value
            weight += count
    return total / weight if weight > 0 else None


def best_epoch(curve: Sequence[EpochPoint], validation: Sequence[ValidationRow] = (), by: str = "mrr") -> Best | None:
    """The best epoch: the best validated one when ``validation`` has rows, else the highest in-training MRR.

    The validated one is the highest validation ``by`` (the config's ``validation.metric``), as
    ``best.json`` chooses. Ties go to the earliest epoch (the same model quality for less
    training). None when nothing measured an MRR (``eval_fraction`` 0 and no validation).
    """
    row = best_of(validation, by) if validation else None
    if row is not None:
        return Best(row.epoch, row.mrr, metric_labels.VALIDATION, None if by == "mrr" else by)
    measured = [p for p in curve if p.mrr_after is not None]
    if not measured:
        return None
    point = max(measured, key=lambda p: (p.mrr_after or 0.0, -p.epoch_idx))
    return Best(point.epoch_idx + 1, point.mrr_after or 0.0, metric_labels.IN_TRAINING)


def _last(curve: Sequence[EpochPoint], validation: Sequence[ValidationRow]) -> Best | None:
    """The last measured epoch, by the same MRR as :func:`best_epoch`."""
    if validation:
        row = max(validation, key=lambda r: r.epoch)
        return Best(row.epoch, row.mrr, metric_labels.VALIDATION)
    measured = [p for p in curve if p.mrr_after is not None]
    return (
        Best(measured[-1].epoch_idx + 1, measured[-1].mrr_after or 0.0, metric_labels.IN_TRAINING) if measured else None
    )


def curve_chart(
    title: str, curve: Sequence[EpochPoint], validation: Sequence[ValidationRow] = (), by: str = "mrr"
) -> str:
    """The SVG learning curve: loss above, MRR below (validation MRR too, when validated), best and last marked."""
    losses = [(p.epoch_idx + 1.0, p.loss) for p in curve if p.loss is not None]
    mrrs = [(p.epoch_idx + 1.0, p.mrr_after) for p in curve if p.mrr_after is not None]
    mrr_series = [Series(metric_labels.IN_TRAINING, mrrs, MRR_COLOR)]
    if validation:
        points = [(float(r.epoch), r.mrr) for r in sorted(validation, key=lambda r: r.epoch)]
        mrr_series.append(Series(metric_labels.VALIDATION, points, VALIDATION_COLOR, dashed=True, dots=True))
    markers = []
    best, last = best_epoch(curve, validation, by), _last(curve, validation)
    if last is not None and (best is None or last.epoch != best.epoch):
        markers.append(Marker(last.epoch, last.mrr, f"last: epoch {last.epoch}, {last.mrr:.3f}"))
    if best is not None:
        markers.append(Marker(best.epoch, best.mrr, f"best: epoch {best.epoch}, {best.mrr:.3f}"))
    panels = [
        Panel("mean loss", [Series("mean loss", losses, LOSS_COLOR)]),
        Panel("MRR", mrr_series, markers, include_zero=True),
    ]
    return chart(title, "epoch", panels)


def curve_sentence(curve: Sequence[EpochPoint], validation: Sequence[ValidationRow] = (), by: str = "mrr") -> str:
    """``best epoch 3: MRR 0.142; last epoch 150: MRR 0.071 (50% below the best) while the loss fell 0.92 → 0.31``.

    With a hint to validation and early stopping (docs/quality.md) when the last epoch is more
    than :data:`DROP_HINT` below the best and the run does not validate.
    """
    best, last = best_epoch(curve, validation, by), _last(curve, validation)
    if best is None or last is None:
        return f"No MRR measured ({metric_labels.IN_TRAINING} needs eval_fraction > 0)."
    chosen = f" (by validation {best.by})" if best.by else ""
    text = f"best epoch {best.epoch}{chosen}: {best.metric} {best.mrr:.3f}; last epoch {last.epoch}: {last.mrr:.3f}"
    drop = (best.mrr - last.mrr) / best.mrr if best.mrr > 0 else 0.0
    if last.epoch != best.epoch and drop >= 0.005:  # "0% below" says nothing
        text += f" ({drop:.0%} below the best)"
    losses = [p.loss for p in curve if p.loss is not None]
    if len(losses) > 1:
        text += f" while the loss {'fell' if losses[-1] < losses[0] else 'went'} {fmt(losses[0])} → {fmt(losses[-1])}"
    text += "."
    if drop > DROP_HINT and not validation:
        text += (
            " Later epochs made the model worse on this measure: a `validation` section with "
            "`early_stopping` keeps the best version and stops there (docs/quality.md)."
        )
    return text


def curve_section(
    title: str, curve: Sequence[EpochPoint], validation: Sequence[ValidationRow] = (), by: str = "mrr"
) -> str:
    """The summary's "Learning curve" section (see the module docstring); ``by`` as in :func:`best_epoch`."""
    if not curve:
        return "## Learning curve\n\nNo epochs recorded yet."
    image = data_uri(curve_chart(title, curve, validation, by))
    alt = f"learning curve: mean loss and {metric_labels.IN_TRAINING} per epoch"
    lines = ["## Learning curve", "", f"![{alt}]({image})", "", curve_sentence(curve, validation, by), ""]
    lines += [f"<details><summary>every epoch ({len(curve)})</summary>", ""]
    lines += [f"| epoch | mean loss | {metric_labels.IN_TRAINING} |", "|---|---|---|"]
    lines += [f"| {p.epoch_idx + 1} | {fmt(p.loss)} | {fmt(p.mrr_after)} |" for p in curve]
    lines += ["", "</details>"]
    return "\n".join(lines)
