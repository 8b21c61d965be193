"""storage.edge_lists.text_fast: the block reader yields exactly what the line-by-line reader does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from storage.edge_lists.parse import Columns, FastPathAnomaly, RawBatch, ReadSpec
from storage.edge_lists.text_fast import fast_batches
from storage.edge_lists.text_slow import slow_batches
from storage.errors import BadDataError

COLUMNS = Columns(lhs=0, rhs=2, rel=1, weight=3)


def _text(seed: int, lines: int) -> bytes:
    rng = np.random.default_rng(seed)
    names = ["a", "bb", "noël", "名前", "x" * 30, "q r"]  # "q r": a space inside a tab-separated name
    out = []
    for i in range(lines):
        if i % 17 == 0:
            out.append("   " if i % 2 else "")
            continue
        lhs, rhs = rng.choice(names, size=2)
        out.append(f"{lhs}{i}\tr{i % 3}\t{rhs}\t{rng.random():.6f}")
    return "\r\n".join(out).encode() + b"\n"


def _read(reader: object, path: Path, spec: ReadSpec) -> dict[str, object]:
    batches: list[RawBatch] = list(reader(str(path), "s3://b/e.tsv", spec, "\t"))  # either reader
    read: dict[str, object] = {}
    for side in ("lhs", "rhs", "rel"):
        arrays = [getattr(b, side) for b in batches]
        assert all(a is None for a in arrays) or all(a is not None for a in arrays)
        read[side] = None if arrays[0] is None else [s for a in arrays for s in a.to_pylist()]
    weights = [b.weight for b in batches]
    return {
        **read,
        "weight": None if weights[0] is None else np.concatenate(weights).tolist(),
        "lines": sum(b.lines for b in batches),
        "blank": sum(b.blank for b in batches),
    }


@pytest.mark.parametrize("block_bytes", [256, 8 << 20])  # many blocks (lines split across them), then one
def test_fast_reader_agrees_with_the_slow_one(tmp_path: Path, block_bytes: int) -> None:
    path = tmp_path / "e.tsv"
    path.write_bytes(_text(0, 400))
    spec = ReadSpec(COLUMNS, block_bytes=block_bytes)
    fast, slow = _read(fast_batches, path, spec), _read(slow_batches, path, spec)
    assert fast == slow
    assert len(fast["lhs"]) == 400 - 24 and fast["blank"] == 24  # lines 0, 17, 34, ... are blank


@pytest.mark.parametrize("columns", [Columns(0, None, 1, None), Columns(None, 2, None, 3)])
def test_fast_reader_agrees_with_the_slow_one_on_one_side(tmp_path: Path, columns: Columns) -> None:
    """A query file's columns: (head, relation) or (tail, weight); the side not read is None."""
    path = tmp_path / "e.tsv"
    path.write_bytes(_text(1, 400))
    spec = ReadSpec(columns, block_bytes=256)
    fast, slow = _read(fast_batches, path, spec), _read(slow_batches, path, spec)
    assert fast == slow
    missing = "rhs" if columns.rhs is None else "lhs"
    present = fast["rhs" if missing == "lhs" else "lhs"]
    assert fast[missing] is None and isinstance(present, list) and len(present) == 400 - 24


def test_a_malformed_line_is_reported_exactly_as_the_slow_reader_names_it(tmp_path: Path) -> None:
    """The block holding it is re-read line by line: same file, line and problem."""
    path = tmp_path / "e.tsv"
    path.write_bytes(b"a\tr\tb\t1\nc\tr\td\tmany\n")
    spec = ReadSpec(COLUMNS)
    with pytest.raises(BadDataError) as slow:
        list(slow_batches(str(path), "s3://b/e.tsv", spec, "\t"))
    with pytest.raises(BadDataError) as fast:
        list(fast_batches(str(path), "s3://b/e.tsv", spec, "\t"))
    assert str(fast.value) == str(slow.value) and "line 2:" in str(fast.value)


def test_column_names_are_handed_to_the_caller() -> None:
    with pytest.raises(FastPathAnomaly, match="column names need a header"):
        list(fast_batches("unused", "e.tsv", ReadSpec(Columns("src", "dst", None, None)), "\t"))


@pytest.mark.parametrize("block_bytes", [256, 8 << 20])  # blocks with and without blank lines, then one block
def test_each_edge_is_numbered_by_its_physical_line_as_the_slow_reader_numbers_it(
    tmp_path: Path, block_bytes: int
) -> None:
    path = tmp_path / "e.tsv"
    path.write_bytes(_text(0, 400))
    spec = ReadSpec(COLUMNS, block_bytes=block_bytes, numbered=True)
    fast = list(fast_batches(str(path), "e.tsv", spec, "\t"))
    slow = list(slow_batches(str(path), "e.tsv", spec, "\t"))
    numbers = [b.numbers for b in fast]
    assert all(n is not None and len(n) == len(b) for n, b in zip(numbers, fast, strict=True))
    expected = [i + 1 for i in range(400) if i % 17]  # lines 1, 18, 35, ... are blank
    assert np.concatenate(numbers).tolist() == expected
    assert np.concatenate([b.numbers for b in slow]).tolist() == expected
    assert [s for b in fast for s in b.lhs.to_pylist()] == [s for b in slow for s in b.lhs.to_pylist()]
    unnumbered = ReadSpec(COLUMNS, block_bytes=block_bytes)
    assert all(b.numbers is None for b in fast_batches(str(path), "e.tsv", unnumbered, "\t"))
