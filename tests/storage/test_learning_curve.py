"""storage.learning_curve: epoch grouping, the best epoch, the sentence and the section of the summary.

Every expected number is computed by hand from the rows below.
"""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from pbg_core.evaluation.early_stopping import ValidationRow
from storage.learning_curve import EpochPoint, best_epoch, curve_chart, curve_section, curve_sentence, epoch_curve
from tests.storage.test_stats_report import bucket_row, curve_rows, eval_stats

SVG = "{http://www.w3.org/2000/svg}"


def point(epoch_idx: int, loss: float | None, mrr: float | None) -> EpochPoint:
    return EpochPoint(epoch_idx, 1, loss, mrr, None, None)


def peak_then_fall(epochs: int = 150) -> list[EpochPoint]:
    """MRR 0.142 at epoch 3, then down to 0.071 at the last; the loss falls all along."""
    mrrs = [0.05, 0.1, 0.142] + [0.142 - 0.071 * i / (epochs - 3) for i in range(1, epochs - 2)]
    return [point(i, 0.92 - (0.92 - 0.31) * i / (epochs - 1), mrr) for i, mrr in enumerate(mrrs)]


def validation_row(epoch: int, mrr: float) -> ValidationRow:
    return ValidationRow(epoch, epoch, mrr, 0.1, 0.5, 100, False, 0.1, "setup")


def test_epoch_curve_groups_by_epoch_with_count_weighted_means() -> None:
    first, second = epoch_curve(curve_rows())
    assert (first.epoch_idx, first.buckets) == (0, 2)
    assert first.loss == pytest.approx(1.25)  # (100 * 2.0 + 300 * 1.0) / 400
    assert first.mrr_after == pytest.approx(0.5)  # (10 * 0.2 + 30 * 0.6) / 40
    assert first.hits10_after == pytest.approx(0.875)  # (10 * 0.5 + 30 * 1.0) / 40
    assert first.edges_per_s == 200.0  # 400 edges / 2 s
    assert (second.epoch_idx, second.buckets) == (1, 1)
    assert second.loss == pytest.approx(0.5)
    assert second.mrr_after == pytest.approx(0.9)
    assert second.edges_per_s == 800.0


def test_epoch_without_eval_has_no_mrr() -> None:
    (only,) = epoch_curve([bucket_row(0, 0, 0, 10, 1.0)])
    assert only.mrr_after is None and only.hits10_after is None and only.edges_per_s is None


def test_the_best_epoch_of_a_peak_then_fall_is_the_peak() -> None:
    best = best_epoch(peak_then_fall())
    assert best is not None and (best.epoch, best.mrr, best.metric) == (3, 0.142, "in-training MRR (sampled)")


def test_ties_go_to_the_earliest_epoch_and_nothing_measured_gives_none() -> None:
    best = best_epoch([point(0, 1.0, 0.2), point(1, 0.9, 0.4), point(2, 0.8, 0.4)])
    assert best is not None and best.epoch == 2
    assert best_epoch([point(0, 1.0, None)]) is None


def test_with_validation_the_best_epoch_is_the_best_validated_one() -> None:
    rows = [validation_row(1, 0.3), validation_row(2, 0.5), validation_row(3, 0.5), validation_row(4, 0.4)]
    best = best_epoch(peak_then_fall(4), rows)  # in-training MRR peaks at epoch 3: validation decides
    assert best is not None and (best.epoch, best.mrr, best.metric) == (2, 0.5, "validation MRR")


def test_the_sentence_compares_the_best_with_the_last_and_hints_at_early_stopping() -> None:
    text = curve_sentence(peak_then_fall())
    assert text.startswith(
        "best epoch 3: in-training MRR (sampled) 0.142; last epoch 150: 0.071 (50% below the best) "
        "while the loss fell 0.92 → 0.31."
    )
    assert "`validation` section with `early_stopping`" in text and "docs/quality.md" in text
    steady = [point(0, 1.0, 0.1), point(1, 0.5, 0.2), point(2, 0.4, 0.19)]  # 5% below: no hint
    assert curve_sentence(steady) == (
        "best epoch 2: in-training MRR (sampled) 0.200; last epoch 3: 0.190 (5% below the best) "
        "while the loss fell 1 → 0.4."
    )
    assert curve_sentence([point(0, 1.0, None)]).startswith("No MRR measured")


def test_the_chart_is_svg_with_ticks_and_the_best_and_last_marked() -> None:
    svg = curve_chart("Learning curve of <umls & co>", peak_then_fall())
    root = ET.fromstring(svg)  # parses: every text escaped
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "Learning curve of <umls & co>" in texts
    assert {"0", "50", "100", "150"} <= set(texts)  # epoch ticks
    assert {"0.00", "0.05", "0.10", "0.15"} <= set(texts)  # MRR ticks, from 0
    assert "best: epoch 3, 0.142" in texts and "last: epoch 150, 0.071" in texts
    assert {"mean loss", "in-training MRR (sampled)", "epoch"} <= set(texts)
    assert len(list(root.iter(f"{SVG}polyline"))) == 2


def test_the_chart_draws_validation_points_when_the_run_validates() -> None:
    rows = [validation_row(e, 0.2 + e / 100) for e in range(1, 11)]
    root = ET.fromstring(curve_chart("c", peak_then_fall(10), rows))
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "validation MRR" in texts and "best: epoch 10, 0.300" in texts
    assert len(list(root.iter(f"{SVG}polyline"))) == 3
    assert len([c for c in root.iter(f"{SVG}circle") if c.get("r") == "2.5"]) == 10  # one dot per validation


def test_a_2000_epoch_chart_stays_small() -> None:
    curve = peak_then_fall(2000)
    rows = [validation_row(e, 0.2) for e in range(1, 2001)]
    svg = curve_chart("c", curve, rows)
    assert len(svg.encode()) < 40_000
    assert "1,500" in [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]


def test_the_section_embeds_the_chart_and_folds_every_epoch() -> None:
    text = curve_section("Learning curve of umls", peak_then_fall(5))
    match = re.search(r"!\[learning curve: ([^\]]+)\]\(data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)\)", text)
    assert match is not None and match.group(1) == "mean loss and in-training MRR (sampled) per epoch"
    ET.fromstring(base64.b64decode(match.group(2)))
    assert "<details><summary>every epoch (5)</summary>" in text and text.endswith("</details>")
    assert "| 5 | 0.31 | 0.071 |" in text
    assert curve_section("c", []) == "## Learning curve\n\nNo epochs recorded yet."


def stats_rows(epochs: int) -> list[dict[str, Any]]:
    return [bucket_row(0, 0, e, 10, 1.0 / (e + 1), epoch=e, after=eval_stats(5, 0.1, 0.2)) for e in range(epochs)]


def test_rows_to_section() -> None:
    assert "every epoch (3)" in curve_section("c", epoch_curve(stats_rows(3)))


def test_the_validation_metric_chooses_the_best_epoch_as_best_json_does() -> None:
    rows = [
        ValidationRow(1, 1, 0.5, 0.1, 0.6, 100, False, 0.1, "s"),
        ValidationRow(2, 2, 0.4, 0.1, 0.9, 100, False, 0.1, "s"),  # lower MRR, higher Hits@10
    ]
    best = best_epoch(peak_then_fall(2), rows, by="r10")
    assert best is not None and (best.epoch, best.mrr, best.by) == (2, 0.4, "r10")
    assert curve_sentence(peak_then_fall(2), rows, by="r10").startswith(
        "best epoch 2 (by validation r10): validation MRR 0.400; last epoch 2: 0.400"
    )
