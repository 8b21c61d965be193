"""storage.report_numbers: reading nested rows, rounding, and the placeholder of a missing value."""

from __future__ import annotations

import math

from storage.report_numbers import MISSING, fmt, fmt_rate, get, number, rate, ratio, sig


def test_get_and_number() -> None:
    row = {"a": {"b": {"c": 3}}, "x": 1}
    assert get(row, "a", "b", "c") == 3 and get(row, "x", "y") is None and get(row, "nope", "c") is None
    assert [number(v) for v in (2, 2.5, math.nan, math.inf, True, "3", None)] == [
        2.0,
        2.5,
        None,
        None,
        None,
        None,
        None,
    ]


def test_rounding_and_formatting() -> None:
    assert (sig(0.123456), ratio(0.123456), rate(1000, 2.0), rate(10, 0.0)) == (0.1235, 0.1235, 500.0, None)
    assert (fmt(0.123456), fmt(None), fmt_rate(12345.6), fmt_rate(None)) == ("0.1235", MISSING, "12,346", MISSING)
