"""storage.svg_chart: nice ticks, thinning that keeps peaks, a parseable document, the data URI."""

from __future__ import annotations

import base64
import xml.etree.ElementTree as ET

import pytest

from storage.svg_chart import Marker, Panel, Series, chart, data_uri, nice_ticks, thin

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(
    ("low", "high", "integer", "expected"),
    [
        (0.0, 1.0, False, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.0, 0.142, False, [0.0, 0.05, 0.1, 0.15]),
        (0.31, 0.92, False, [0.2, 0.4, 0.6, 0.8, 1.0]),
        (1.0, 150.0, True, [0.0, 50.0, 100.0, 150.0]),
        (1.0, 2000.0, True, [0.0, 500.0, 1000.0, 1500.0, 2000.0]),
        (1.0, 5.0, True, [1.0, 2.0, 3.0, 4.0, 5.0]),
        (3.0, 3.0, False, [2.6, 2.8, 3.0, 3.2, 3.4]),  # flat: widened by 10% around the value
    ],
)
def test_nice_ticks(low: float, high: float, integer: bool, expected: list[float]) -> None:
    assert nice_ticks(low, high, integer=integer) == expected


def test_nice_ticks_cover_the_range_in_4_to_6_steps() -> None:
    for low, high in ((0.0712, 0.0713), (12_345.0, 99_999.0), (-3.0, 7.5), (0.001, 0.9)):
        ticks = nice_ticks(low, high)
        assert 4 <= len(ticks) <= 6 and ticks[0] <= low and ticks[-1] >= high, (low, high, ticks)


def test_thin_keeps_each_stretchs_lowest_and_highest() -> None:
    points = [(float(x), 1.0) for x in range(1000)]
    points[517] = (517.0, 9.0)  # one spike
    kept = thin(points, 100)
    assert len(kept) <= 100 and (517.0, 9.0) in kept
    assert [x for x, _ in kept] == sorted(x for x, _ in kept)
    assert thin(points[:10], 100) == points[:10]


def test_the_chart_parses_and_escapes_its_text() -> None:
    panel = Panel('y "quoted"', [Series("a < b", [(1.0, 0.5), (2.0, 0.7)], "#000000")], [Marker(2.0, 0.7, "x & y")])
    root = ET.fromstring(chart("t <&>", "epoch", [panel]))
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"t <&>", "a < b", "x & y", 'y "quoted"', "epoch"} <= set(texts)
    assert root.find(f"{SVG}rect") is not None and root.find(f"{SVG}rect").get("fill") == "#ffffff"  # type: ignore[union-attr]
    assert root.get("font-family") == "sans-serif"


def test_data_uri_round_trips() -> None:
    uri = data_uri("<svg/>")
    assert uri.startswith("data:image/svg+xml;base64,")
    assert base64.b64decode(uri.split(",", 1)[1]) == b"<svg/>"


@pytest.mark.parametrize("peak", [0.15, 0.2, 0.5, 0.142, 1.0])
def test_a_marked_peak_gets_its_label_above_it_not_over_the_curve_after_it(peak: float) -> None:
    # The best epoch is the highest MRR: a peak on a round tick used to put its label below the
    # point, its white box over the curve falling after it.
    curve = [(1.0, peak * 0.3), (2.0, peak * 0.8), (3.0, peak), *((float(x), peak * 0.5) for x in range(4, 40))]
    panel = Panel("MRR", [Series("MRR", curve, "#000000")], [Marker(3.0, peak, "best epoch 3")], include_zero=True)
    root = ET.fromstring(chart("t", "epoch", [panel]))
    [circle] = [c for c in root.iter(f"{SVG}circle") if c.get("r") == "4.5"]
    [label] = [t for t in root.iter(f"{SVG}text") if t.text == "best epoch 3"]
    assert float(label.get("y")) < float(circle.get("cy")), "the label is below its point"  # type: ignore[arg-type]
