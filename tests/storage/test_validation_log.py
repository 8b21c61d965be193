"""storage.validation_log: rows keyed by version (a retry replaces, never duplicates), atomic, format errors name the file."""

from __future__ import annotations

import json
import math

import pytest
from store_io import StorePath

from pbg_core.evaluation.early_stopping import ValidationRow
from storage.errors import BadDataError
from storage.validation_log import ValidationLog


def _row(version: int, mrr: float) -> ValidationRow:
    return ValidationRow(version, version, mrr, 0.5, 0.9, 661, False, 0.25, "edges/valid|all")


def test_missing_file_reads_empty(root: StorePath) -> None:
    assert ValidationLog(str(root)).read() == []


def test_rows_round_trip_sorted_and_a_rewrite_replaces(root: StorePath) -> None:
    log = ValidationLog(str(root))
    log.write(_row(3, 0.3))
    log.write(_row(1, 0.1))
    log.write(_row(3, 0.33))  # the same version validated again (a retried iteration)
    assert log.read() == [_row(1, 0.1), _row(3, 0.33)]
    data = json.loads((root / "validation.json").read_text())
    assert data["format"] == 1 and [r["version"] for r in data["rows"]] == [1, 3]


def test_nan_survives_the_round_trip(root: StorePath) -> None:
    log = ValidationLog(str(root))
    log.write(_row(1, math.nan))
    assert math.isnan(log.read()[0].mrr)


def test_a_torn_temporary_file_is_ignored(root: StorePath) -> None:
    log = ValidationLog(str(root))
    log.write(_row(1, 0.1))
    if not root.is_s3:
        (root / ".validation.json.x.tmp").write_text('{"format": 1, "ro')  # a write cut off before its rename
    assert log.read() == [_row(1, 0.1)]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "invalid JSON at line 1"),
        ('{"format": 2, "rows": []}', 'expected {"format": 1'),
        ('{"format": 1, "rows": [{"version": 1}]}', "a row must have exactly the fields"),
        (
            json.dumps({"format": 1, "rows": [{**_row(1, 0.1).__dict__, "count": "many"}]}),
            "row field 'count' must be int",
        ),
    ],
)
def test_format_errors_name_the_file(root: StorePath, text: str, says: str) -> None:
    (root / "validation.json").write_text(text)
    with pytest.raises(BadDataError, match="validation.json") as info:
        ValidationLog(str(root)).read()
    assert says in str(info.value)
