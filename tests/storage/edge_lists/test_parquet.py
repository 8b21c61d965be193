"""storage.edge_lists.parquet: columns by index or name, ids of any type, and the rows it refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.edge_lists.parquet import parquet_batches
from storage.edge_lists.parse import Columns, RawBatch, ReadSpec
from storage.errors import BadDataError

URL = "s3://b/edges.parquet"


def _file(tmp_path: Path, **columns: list) -> str:
    path = str(tmp_path / "edges.parquet")
    pq.write_table(pa.table(columns), path)
    return path


def _read(path: str, spec: ReadSpec, rows_per_batch: int = 1 << 20) -> list[RawBatch]:
    return list(parquet_batches(path, URL, spec, rows_per_batch))


def test_columns_by_name_or_index_integer_ids_as_text_and_float32_weights(tmp_path: Path) -> None:
    path = _file(tmp_path, src=[1, 2, 3], rel=["r", "s", "r"], dst=["x", "y", "z"], w=[0.5, 1.0, 2.0])
    by_name = _read(path, ReadSpec(Columns("src", "dst", "rel", "w")), rows_per_batch=2)
    by_index = _read(path, ReadSpec(Columns(0, 2, 1, 3)))
    assert [len(b) for b in by_name] == [2, 1] and [b.lines for b in by_name] == [2, 1]
    for batches in (by_name, by_index):
        assert [s for b in batches for s in b.lhs.to_pylist()] == ["1", "2", "3"]
        assert [s for b in batches for s in b.rel.to_pylist()] == ["r", "s", "r"]  # rel given
        weights = np.concatenate([b.weight for b in batches])  # weight given
        assert weights.dtype == np.float32 and weights.tolist() == [0.5, 1.0, 2.0]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (Columns("src", "nope", None, None), "column 'nope' not found; the file's columns are ['src', 'dst', 'w']"),
        (Columns(0, 5, None, None), "column index 5 is out of range: the file has 3 columns ['src', 'dst', 'w']"),
    ],
)
def test_a_missing_column_names_the_file_and_its_columns(tmp_path: Path, columns: Columns, message: str) -> None:
    path = _file(tmp_path, src=["a"], dst=["b"], w=[1.0])
    with pytest.raises(BadDataError) as caught:
        _read(path, ReadSpec(columns))
    assert URL in str(caught.value) and message in str(caught.value)


@pytest.mark.parametrize(
    ("dst", "w"),
    [
        (["b", "", "d"], [1.0, 1.0, 1.0]),
        (["b", None, "d"], [1.0, 1.0, 1.0]),
        (["b", "c", "d"], [1.0, None, 1.0]),
        (["b", "c", "d"], [1.0, float("inf"), 1.0]),
    ],
)
def test_an_empty_or_null_id_or_a_bad_weight_names_its_row(tmp_path: Path, dst: list, w: list) -> None:
    path = _file(tmp_path, src=["a", "c", "e"], dst=dst, w=w)
    with pytest.raises(BadDataError, match="row 2: expected non-empty ids and a finite weight"):
        _read(path, ReadSpec(Columns(0, 1, None, 2)))


def test_skip_bad_lines_drops_bad_rows_and_unknown_relations_and_lists_them(tmp_path: Path) -> None:
    path = _file(tmp_path, src=["a", "", "c", "d"], rel=["r", "r", "q", "r"], dst=["b", "b", "b", "b"])
    spec = ReadSpec(Columns(0, 2, 1, None), skip_bad_lines=True, relations=frozenset({"r"}))
    (batch,) = _read(path, spec)
    assert batch.lhs.to_pylist() == ["a", "d"] and batch.lines == 4
    assert batch.bad == [
        "row 2: expected non-empty ids and a finite weight",
        "row 3: relation 'q' is not in the config (expected one of 'r')",
    ]


def test_a_file_without_rows_is_bad_data(tmp_path: Path) -> None:
    path = str(tmp_path / "edges.parquet")
    pq.write_table(pa.table({"src": pa.array([], pa.string()), "dst": pa.array([], pa.string())}), path)
    with pytest.raises(BadDataError, match="row 1: expected an edge per row, the file has no rows"):
        _read(path, ReadSpec(Columns(0, 1, None, None)))


def test_numbered_rows_are_the_files_rows_the_bad_ones_skipped(tmp_path: Path) -> None:
    path = _file(tmp_path, src=["a", "", "c", "d", "e"], dst=["b", "b", "b", "b", "b"])
    spec = ReadSpec(Columns(0, 1, None, None), skip_bad_lines=True, numbered=True)
    batches = _read(path, spec, rows_per_batch=2)
    assert [n for b in batches for n in b.numbers.tolist()] == [1, 3, 4, 5]
    assert all(b.numbers is None for b in _read(path, ReadSpec(Columns(0, 1, None, None), skip_bad_lines=True)))


def test_a_commands_wording_names_its_rows_and_the_option_of_a_missing_column(tmp_path: Path) -> None:
    path = _file(tmp_path, src=["a"], dst=["b"])
    with pytest.raises(BadDataError) as caught:
        _read(path, ReadSpec(Columns(0, 3, None, None), labels={"lhs": "-l ", "rhs": "-r "}))
    assert str(caught.value) == f"{URL}: column index 3 (-r 3) is out of range: the file has 2 columns ['src', 'dst']"
    with pytest.raises(BadDataError) as caught:
        _read(path, ReadSpec(Columns("head", None, None, None), labels={"lhs": "-l "}))
    assert str(caught.value) == f"{URL}: column 'head' (-l head) not found; the file's columns are ['src', 'dst']"
    pq.write_table(pa.table({"src": pa.array([], pa.string())}), path)
    with pytest.raises(BadDataError) as caught:
        _read(path, ReadSpec(Columns(0, None, None, None), rows="names"))
    assert str(caught.value) == f"{URL}: no names: the file has 0 rows"
