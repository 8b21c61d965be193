"""storage.edge_lists.text_slow: the line-by-line reader, the authority on what a line means."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from storage.edge_lists.parse import Columns, RawBatch, ReadSpec
from storage.edge_lists.text_slow import slow_batches, slow_block
from storage.errors import BadDataError

SPEC = ReadSpec(Columns(lhs=0, rhs=2, rel=1, weight=3))


def _read(tmp_path: Path, text: bytes, spec: ReadSpec = SPEC) -> list[RawBatch]:
    local = tmp_path / "edges.tsv"
    local.write_bytes(text)
    return list(slow_batches(str(local), "s3://b/edges.tsv", spec, "\t"))


def test_edges_blank_lines_crlf_and_unicode(tmp_path: Path) -> None:
    text = "a\tr\tb\t0.5\r\n\n  \n\t\t\t\nnoël\tr\t名\t2\n".encode()
    (batch,) = _read(tmp_path, text)
    assert batch.lhs.to_pylist() == ["a", "noël"] and batch.rhs.to_pylist() == ["b", "名"]
    assert batch.rel is not None and batch.rel.to_pylist() == ["r", "r"]
    assert batch.weight is not None and batch.weight.dtype == np.float32 and batch.weight.tolist() == [0.5, 2.0]
    assert (batch.lines, batch.blank) == (5, 3)  # whitespace-only and all-ids-empty lines are blank


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b"a\tr\tb", "line 2: expected at least 4 columns (lhs=0, rhs=2, rel=1, weight=3, 0-based) but found 3"),
        (b"a\tr\t\t1", "line 2: empty name in column 2 (repeated delimiter?)"),
        (b"a\tr\tb\tnan", "line 2: expected a finite number as weight, got 'nan'"),
        (b"a\tr\tb\theavy", "line 2: expected a finite number as weight, got 'heavy'"),
        (b"a\xff\tr\tb\t1", "line 2: expected UTF-8 text in column 0 (invalid start byte)"),
    ],
)
def test_a_malformed_line_names_the_file_line_and_problem(tmp_path: Path, line: bytes, problem: str) -> None:
    with pytest.raises(BadDataError) as caught:
        _read(tmp_path, b"x\tr\ty\t1\n" + line + b"\n")
    assert "s3://b/edges.tsv" in str(caught.value) and problem in str(caught.value)


def test_the_column_hint_is_given_for_the_first_data_line_only(tmp_path: Path) -> None:
    with pytest.raises(BadDataError, match=r"line 2: .* found 1 \(is a column index or the delimiter wrong\?\)"):
        _read(tmp_path, b"\na b r 1\n")


def test_skip_bad_lines_lists_them_and_keeps_the_good_ones(tmp_path: Path) -> None:
    spec = ReadSpec(SPEC.columns, skip_bad_lines=True, relations=frozenset({"r"}))
    (batch,) = _read(tmp_path, b"a\tr\tb\t1\nc\tq\td\t1\ne\tr\tf\n", spec)
    assert batch.lhs.to_pylist() == ["a"] and batch.lines == 3
    assert batch.bad[0].startswith("line 2: relation 'q' in column 1 is not in the config (expected one of 'r')")
    assert batch.bad[1].startswith("line 3: expected at least 4 columns")


def test_a_file_without_edges_is_bad_data(tmp_path: Path) -> None:
    with pytest.raises(BadDataError, match="line 1: expected an edge per line, the file has no edges"):
        _read(tmp_path, b"\n\n")


def test_a_block_numbers_its_lines_from_where_it_starts() -> None:
    with pytest.raises(BadDataError, match="line 41: empty name in column 0"):
        list(slow_block(b"a\tr\tb\t1\n\tr\tb\t1\n", 40, "e.tsv", SPEC, "\t"))


def test_a_commands_wording_names_its_rows_and_its_options(tmp_path: Path) -> None:
    """A file of queries read for ``pbg predict``: "no queries", and the columns as its options give them."""
    spec = ReadSpec(
        Columns(lhs=0, rhs=None, rel=3, weight=None), rows="queries", labels={"lhs": "-l ", "rel": "--rel-col "}
    )
    with pytest.raises(BadDataError) as caught:
        _read(tmp_path, b"\n \n", spec)
    assert str(caught.value) == "s3://b/edges.tsv: no queries: the file has no line, or blank ones only"
    with pytest.raises(BadDataError) as caught:
        _read(tmp_path, b"a\tr\n", spec)
    assert str(caught.value) == (
        "s3://b/edges.tsv: line 1: expected at least 4 columns (-l 0, --rel-col 3, 0-based) but found 2 "
        "(is a column index or the delimiter wrong?): 'a\\tr'"
    )


def test_numbered_edges_carry_their_physical_line(tmp_path: Path) -> None:
    spec = ReadSpec(SPEC.columns, numbered=True)
    batches = _read(tmp_path, b"\n\na\tr\tb\t1\n\t\t\t\n\nc\tr\td\t2\r\n", spec)
    assert [n for b in batches for n in b.numbers.tolist()] == [3, 6]
    assert all(b.numbers is None for b in _read(tmp_path, b"a\tr\tb\t1\n"))
