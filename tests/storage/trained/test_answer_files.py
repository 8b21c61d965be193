"""storage.trained.answer_files: query and edge files read as edge lists, answer tables written whole.

Real files on local disk and on the moto S3 server (``store_root``): TSV, CSV, ``.gz`` and
Parquet in, each file's rows in order, a model's bad names placed by file and row; TSV, CSV,
gzipped text and Parquet out, read back equal; an output refused, interrupted or failing leaves
the disk byte-identical. The commands on top are tested in tests/flows/cli/.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from disk_state import changes, tree_state
from store_io import get_bytes, join, put_bytes, put_text

from storage.edge_lists.parse import Columns
from storage.errors import BadDataError, OutputExistsError
from storage.trained.answer_files import Rows, read_rows, table_format, table_output, write_tsv
from storage.trained.name_index import NameProblem, UnknownEntityError

HEAD_REL_TAIL = Columns(lhs=0, rhs=2, rel=1, weight=None)
TABLE = pa.table(
    {
        "query": pa.array([0, 0, 1], pa.int64()),
        "head": ["aspirin", "aspirin", 'the "x" drug'],
        "relation": ["treats", "treats", "treats"],
        "tail": ["diabetes", "asthma", None],
        "rank": pa.array([1, 2, None], pa.int64()),
        "score": pa.array(np.array([12.249147415161133, -0.5, np.nan], np.float32), mask=np.array([0, 0, 1], bool)),
    }
)


def test_rows_of_text_gzip_and_parquet_files_in_order(store_root: str) -> None:
    put_text(join(store_root, "a.tsv"), "aspirin\ttreats\tdiabetes\n\ninsulin\ttreats\tasthma\n")
    put_text(join(store_root, "b.csv"), "metformin,treats,diabetes\n")
    put_bytes(join(store_root, "c.tsv.gz"), gzip.compress(b"aspirin\tinteracts\tinsulin\n"))
    buffer = io.BytesIO()
    pq.write_table(pa.table({"drug": ["insulin"], "rel": ["treats"], "disease": ["migraine"]}), buffer)
    put_bytes(join(store_root, "d.parquet"), buffer.getvalue())
    urls = [join(store_root, name) for name in ("a.tsv", "c.tsv.gz")]
    rows = read_rows(urls, HEAD_REL_TAIL, None, None)
    assert (rows.lhs, rows.rel, rows.rhs) == (
        ["aspirin", "insulin", "aspirin"],
        ["treats", "treats", "interacts"],
        ["diabetes", "asthma", "insulin"],
    )
    assert rows.files == [(urls[0], 2), (urls[1], 1)] and len(rows) == 3
    csv = read_rows([join(store_root, "b.csv")], HEAD_REL_TAIL, ",", None)
    assert (csv.lhs, csv.rel, csv.rhs) == (["metformin"], ["treats"], ["diabetes"])
    named = Columns(lhs="drug", rhs=None, rel="rel", weight=None)
    parquet = read_rows([join(store_root, "d.parquet")], named, None, None)
    assert (parquet.lhs, parquet.rel, parquet.rhs) == (["insulin"], ["treats"], None)


def test_a_models_bad_names_are_placed_by_file_and_row() -> None:
    rows = Rows(["a"] * 5, None, None, [("q1.tsv", 2), ("q2.tsv", 3)])
    assert [rows.where(position) for position in range(5)] == [
        "q1.tsv row 1",
        "q1.tsv row 2",
        "q2.tsv row 1",
        "q2.tsv row 2",
        "q2.tsv row 3",
    ]
    problems = [
        NameProblem("asprin", "unknown head 'asprin' of type 'drug' (closest: 'aspirin')", "heads", 3),
        NameProblem("x", "", "heads", 1),
        NameProblem("y", "", "relations", 4),
    ]
    assert str(rows.located(UnknownEntityError(problems))) == (
        "q2.tsv row 2: unknown head 'asprin' of type 'drug' (closest: 'aspirin'); 2 more not usable: "
        "'x' (q1.tsv row 2), 'y' (q2.tsv row 3)"
    )


def test_a_file_without_a_column_asked_for_names_file_and_line(tmp_path: Path) -> None:
    path = f"{tmp_path}/q.tsv"
    put_text(path, "aspirin\ttreats\n")
    with pytest.raises(BadDataError, match=r"q.tsv: line 1: expected at least 3 columns"):
        read_rows([path], HEAD_REL_TAIL, None, None)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("out.parquet", ("parquet", False)),
        ("out.PQ", ("parquet", False)),
        ("out.csv", ("csv", False)),
        ("out.csv.gz", ("csv", True)),
        ("out.tsv", ("tsv", False)),
        ("out.tsv.gz", ("tsv", True)),
        ("results", ("tsv", False)),
        ("s3://b/out.parquet?versionId=1", ("parquet", False)),
    ],
)
def test_the_suffix_names_the_format(name: str, expected: tuple[str, bool]) -> None:
    assert table_format(name) == expected


@pytest.mark.parametrize("name", ["out.tsv", "out.tsv.gz", "out.csv", "out.csv.gz", "out.parquet"])
def test_a_table_written_reads_back_equal(store_root: str, name: str) -> None:
    url = join(store_root, "answers", name)
    with table_output(url, 1000, None, what="prediction") as write:
        write(TABLE)
    data = get_bytes(url)
    if name.endswith(".parquet"):
        assert pq.read_table(pa.BufferReader(data)).equals(TABLE)
        return
    text = gzip.decompress(data) if name.endswith(".gz") else data
    options = pa_csv.ParseOptions(delimiter="," if ".csv" in name else "\t")
    read = pa_csv.read_csv(
        pa.BufferReader(text),
        parse_options=options,
        convert_options=pa_csv.ConvertOptions(column_types=TABLE.schema, strings_can_be_null=True),
    )
    assert read.equals(TABLE)


def test_tsv_writes_names_as_they_are_and_floats_exactly() -> None:
    stream = io.BytesIO()
    write_tsv(TABLE, stream, "out.tsv")
    assert stream.getvalue().decode().splitlines() == [
        "query\thead\trelation\ttail\trank\tscore",
        "0\taspirin\ttreats\tdiabetes\t1\t12.249147",
        "0\taspirin\ttreats\tasthma\t2\t-0.5",
        '1\tthe "x" drug\ttreats\t\t\t',
    ]
    assert np.float32("12.249147") == np.float32(12.249147415161133)  # the text is the float32 itself


def test_a_name_a_tsv_line_cannot_carry_is_refused_and_nothing_is_written(store_root: str) -> None:
    url = join(store_root, "out", "answers.tsv")
    before = tree_state(store_root)
    table = TABLE.set_column(1, "head", pa.array(["aspirin", "aspirin", "two\twords"]))
    with pytest.raises(BadDataError) as caught, table_output(url, 1000, None, what="prediction") as write:
        write(table)
    assert str(caught.value) == (
        f"{url}: head 'two\\twords' holds a tab or a line break, which a TSV line cannot carry; write Parquet "
        "(.parquet) or CSV (.csv) instead"
    )
    assert changes(before, tree_state(store_root)) == []


def test_an_interrupt_while_writing_leaves_nothing(store_root: str) -> None:
    url = join(store_root, "answers.parquet")
    before = tree_state(store_root)
    with pytest.raises(KeyboardInterrupt), table_output(url, 1000, None, what="prediction") as write:
        write(TABLE)  # written in full to the staging file, not yet published
        raise KeyboardInterrupt
    assert changes(before, tree_state(store_root)) == []


def test_an_existing_output_is_replaced_only_when_asked(store_root: str) -> None:
    url = join(store_root, "answers.tsv")
    put_text(url, "an older result\n")
    before = tree_state(store_root)
    with (
        pytest.raises(OutputExistsError, match="refusing to overwrite prediction output"),
        table_output(url, 1000, None, what="prediction") as write,
    ):
        write(TABLE)
    assert changes(before, tree_state(store_root)) == []
    with table_output(url, 1000, None, what="prediction", replace=True) as write:
        write(TABLE)
    assert get_bytes(url).decode().splitlines()[1] == "0\taspirin\ttreats\tdiabetes\t1\t12.249147"
