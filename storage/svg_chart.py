"""A dependency-free SVG line chart: stacked panels sharing one x axis, as text.

Drawn for the run summary's learning curve (:mod:`storage.learning_curve`), embedded in Prefect's
markdown as a ``data:image/svg+xml`` image (:func:`data_uri`): Prefect 3.9's UI keeps such an
``<img>`` and strips an inline ``<svg>`` element. No plotting library is a dependency of pbg-flow,
so the chart is written here: axes with "nice" ticks (:func:`nice_ticks`), polylines, point
markers with labels, a legend, a white background (readable in the UI's dark theme), every text
XML-escaped. Very long series are thinned (:func:`thin`) keeping each stretch's lowest and
highest point, so a spike survives and the file stays small.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

Point = tuple[float, float]
_Scale = Callable[[float], float]  # data to pixels on one axis

WIDTH = 720
PANEL_HEIGHT = 150
LEFT, RIGHT = 70, 24  # room for the y tick labels; for the last marker's label
TOP = 58  # below the title and the legend
LABEL_ROOM = 20  # px above a panel's highest point: its marker's label goes above it (_panel)
GAP = 34  # between panels: the upper panel's tick labels
BOTTOM = 46  # the x tick labels and the axis title
MAX_POINTS = 600  # per series; more are thinned (min and max of each stretch kept)
MAX_DOTS = 80  # a dotted series with more points is drawn without its dots
CHAR_WIDTH = 6.5  # about the width of a character of the 11 px sans-serif text, for boxes and the legend


@dataclass(frozen=True)
class Series:
    """One line of a panel; ``dots`` draws a small circle at each point (a measured point, not a trend)."""

    label: str
    points: Sequence[Point]
    color: str
    dashed: bool = False
    dots: bool = False


@dataclass(frozen=True)
class Marker:
    """A labelled point (best, last) on one panel, with a dashed vertical line through every panel."""

    x: float
    y: float
    label: str
    color: str = "#333333"


@dataclass(frozen=True)
class Panel:
    """One plot area: its y axis title, its lines and its markers."""

    y_label: str
    series: Sequence[Series]
    markers: Sequence[Marker] = field(default_factory=tuple)
    include_zero: bool = False  # the y axis starts at 0 (a ratio in [0, 1], so drops are seen at scale)


def chart(title: str, x_label: str, panels: Sequence[Panel]) -> str:
    """The SVG document of ``panels`` stacked top to bottom over one x axis (integers, e.g. epochs)."""
    xs = [x for panel in panels for s in panel.series for x, _ in s.points]
    x_ticks = nice_ticks(min(xs, default=0.0), max(xs, default=1.0), integer=True)
    x_low, x_high = x_ticks[0], x_ticks[-1]
    height = TOP + len(panels) * PANEL_HEIGHT + (len(panels) - 1) * GAP + BOTTOM
    right = WIDTH - RIGHT

    def sx(x: float) -> float:
        return LEFT + (x - x_low) / (x_high - x_low) * (right - LEFT)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        _text(WIDTH / 2, 20, title, size=14, anchor="middle", bold=True),
        *_legend([s for panel in panels for s in panel.series], y=40),
    ]
    for index, panel in enumerate(panels):
        top = TOP + index * (PANEL_HEIGHT + GAP)
        parts += _panel(panel, top, sx, x_ticks)
    bottom = TOP + len(panels) * PANEL_HEIGHT + (len(panels) - 1) * GAP
    for marker_x in sorted({m.x for panel in panels for m in panel.markers}):
        parts.append(
            f'<line x1="{sx(marker_x):.1f}" y1="{TOP}" x2="{sx(marker_x):.1f}" y2="{bottom}" '
            'stroke="#999999" stroke-dasharray="3,3"/>'
        )
    for tick in x_ticks:
        parts.append(_text(sx(tick), bottom + 16, _tick_label(tick, x_ticks), anchor="middle"))
    parts.append(_text((LEFT + right) / 2, bottom + 36, x_label, anchor="middle"))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _panel(panel: Panel, top: float, sx: _Scale, x_ticks: Sequence[float]) -> list[str]:
    ys = [y for s in panel.series for _, y in s.points]
    low, high = min(ys, default=0.0), max(ys, default=1.0)
    ticks = _ticks_with_room(min(low, 0.0) if panel.include_zero else low, high, bool(panel.markers))
    y_low, y_high = ticks[0], ticks[-1]
    bottom, right = top + PANEL_HEIGHT, WIDTH - RIGHT

    def sy(y: float) -> float:
        return bottom - (y - y_low) / (y_high - y_low) * PANEL_HEIGHT

    parts = [
        f'<rect x="{LEFT}" y="{top}" width="{right - LEFT}" height="{PANEL_HEIGHT}" fill="none" stroke="#444444"/>'
    ]
    for tick in ticks:
        parts.append(f'<line x1="{LEFT}" y1="{sy(tick):.1f}" x2="{right}" y2="{sy(tick):.1f}" stroke="#e5e5e5"/>')
        parts.append(_text(LEFT - 6, sy(tick) + 4, _tick_label(tick, ticks), anchor="end"))
    for tick in x_ticks:
        parts.append(
            f'<line x1="{sx(tick):.1f}" y1="{bottom}" x2="{sx(tick):.1f}" y2="{bottom + 4}" stroke="#444444"/>'
        )
    parts.append(
        f'<text x="16" y="{top + PANEL_HEIGHT / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {top + PANEL_HEIGHT / 2:.1f})">{escape(panel.y_label)}</text>'
    )
    for series in panel.series:
        parts += _series(series, sx, sy)
    for marker in panel.markers:
        x, y = sx(marker.x), sy(marker.y)
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="none" stroke="{marker.color}" stroke-width="2"/>'
        )
        near_right = x > (LEFT + right) / 2
        label_y = y - 8 if y - 8 > top + 10 else y + 16
        width = CHAR_WIDTH * len(marker.label)  # a white box under the label: readable over the lines
        box_x = x - 7 - width if near_right else x + 7
        parts.append(
            f'<rect x="{box_x - 2:.1f}" y="{label_y - 11:.1f}" width="{width + 4:.1f}" height="15" '
            'fill="#ffffff" fill-opacity="0.85"/>'
        )
        parts.append(
            _text(x - 7 if near_right else x + 7, label_y, marker.label, anchor="end" if near_right else "start")
        )
    return parts


def _ticks_with_room(low: float, high: float, labelled: bool) -> list[float]:
    """The y ticks; with markers, ``LABEL_ROOM`` px left above the highest point.

    A marker's label sits above its point when there is room below the panel's top edge, else
    below it, where it hid the curve right after a peak (the best epoch is the highest MRR)."""
    ticks = nice_ticks(low, high)
    for _ in range(3):  # a wider range can take a coarser step: settles in one or two rounds
        room = (ticks[-1] - high) / (ticks[-1] - ticks[0]) * PANEL_HEIGHT
        if not labelled or room >= LABEL_ROOM:
            break
        ticks = nice_ticks(low, high + (LABEL_ROOM - room) / PANEL_HEIGHT * (ticks[-1] - ticks[0]) * 1.5)
    return ticks


def _series(series: Series, sx: _Scale, sy: _Scale) -> list[str]:
    points = thin(series.points, MAX_POINTS)
    if not points:
        return []
    coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    dash = ' stroke-dasharray="6,3"' if series.dashed else ""
    parts = [f'<polyline points="{coords}" fill="none" stroke="{series.color}" stroke-width="1.8"{dash}/>']
    if series.dots and len(points) <= MAX_DOTS:
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{series.color}"/>' for x, y in points]
    return parts


def _legend(series: Sequence[Series], y: float) -> list[str]:
    parts, x = [], float(LEFT)
    for s in series:
        dash = ' stroke-dasharray="6,3"' if s.dashed else ""
        parts.append(
            f'<line x1="{x:.1f}" y1="{y - 4}" x2="{x + 22:.1f}" y2="{y - 4}" stroke="{s.color}" stroke-width="2"{dash}/>'
        )
        parts.append(_text(x + 27, y, s.label))
        x += 27 + CHAR_WIDTH * len(s.label) + 22
    return parts


def _text(x: float, y: float, text: str, size: int = 11, anchor: str = "start", bold: bool = False) -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor={quoteattr(anchor)}{weight} '
        f'fill="#222222">{escape(text)}</text>'
    )


def nice_ticks(low: float, high: float, integer: bool = False) -> list[float]:
    """4 to 6 evenly spaced round values (steps 1, 2, 2.5 or 5 times a power of ten) covering [low, high].

    A flat range is widened around its value; ``integer`` keeps steps whole (epochs).
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        low, high = 0.0, 1.0
    if high - low <= 0:
        pad = abs(low) * 0.1 or 1.0
        low, high = low - pad, high + pad
    exponent = math.floor(math.log10((high - low) / 5))
    for power in range(exponent - 1, exponent + 3):
        for mantissa in (1.0, 2.0, 2.5, 5.0):
            step = mantissa * 10.0**power
            if integer and (step < 1 or step != int(step)):
                continue
            first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
            if last - first + 1 <= 6:
                return [_clean((first + i) * step) for i in range(max(last - first, 1) + 1)]
    return [low, high]  # unreachable for finite input: the loop's last steps cover any range


def _clean(value: float) -> float:
    """``value`` without floating-point noise (``0.30000000000000004`` -> ``0.3``)."""
    return float(f"{value:.12g}")


def _tick_label(value: float, ticks: Sequence[float]) -> str:
    """``value`` with as many decimals as the ticks' step needs (``0.25``, ``1``, ``1,500``)."""
    step = abs(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    decimals = next((d for d in range(10) if abs(round(step, d) - step) < step * 1e-6), 10)
    return f"{value:,.{decimals}f}"


def thin(points: Sequence[Point], max_points: int) -> list[Point]:
    """``points`` (in x order) reduced to at most ``max_points``: each stretch's lowest and highest.

    The points are cut into ``max_points // 2`` consecutive stretches; each keeps its minimum and
    maximum in x order, so a peak or a dip of one point stays visible.
    """
    if len(points) <= max_points:
        return list(points)
    stretches = max(1, max_points // 2)
    kept: list[Point] = []
    for i in range(stretches):
        chunk = points[i * len(points) // stretches : (i + 1) * len(points) // stretches]
        if not chunk:
            continue
        lowest, highest = min(chunk, key=lambda p: p[1]), max(chunk, key=lambda p: p[1])
        kept += sorted({lowest, highest}, key=lambda p: p[0])
    return kept


def data_uri(svg: str) -> str:
    """``data:image/svg+xml;base64,...`` of an SVG document (what a markdown image may point to)."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
