"""storage.trained.answer_files: query and edge files read as edge lists, answer tables written whole.

Real files on local disk and on the moto S3 server (``store_root``): TSV, CSV, ``.gz`` and
Parquet in, each file's rows in order, a model's bad names placed by file and physical line (the
line the readers' own errors name), errors worded for the commands; TSV, CSV, gzipped or bzip2ed
text and Parquet out, read back equal, other compressions refused; an output refused, interrupted or failing leaves
the disk byte-identical. The commands on top are tested in tests/flows/cli/.
"""

from __future__ import annotations

import bz2
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
from storage.trained.answer_files import UnwritableFormat, read_rows, table_format, table_output, write_tsv
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


def test_a_models_bad_names_are_placed_by_file_and_physical_line(tmp_path: Path) -> None:
    """One numbering: a bad name is placed on the line an editor shows, blank lines counted, as the
    readers' own errors place a malformed line (the review's short2.tsv and bad2.tsv)."""
    put_text(f"{tmp_path}/q1.tsv", "\n\naspirin\ttreats\n\nasprin\ttreats\n")
    pq.write_table(pa.table({"drug": ["x", "insulin", "y"], "rel": ["treats"] * 3}), f"{tmp_path}/q2.parquet")
    put_bytes(f"{tmp_path}/q3.tsv.gz", gzip.compress(b"insulin\ttreats\n\n\nz\ttreats\n"))
    urls = [f"{tmp_path}/q1.tsv", f"{tmp_path}/q2.parquet", f"{tmp_path}/q3.tsv.gz"]
    rows = read_rows(urls, Columns(lhs=0, rhs=None, rel=1, weight=None), None, None)
    assert rows.lhs == ["aspirin", "asprin", "x", "insulin", "y", "insulin", "z"]
    assert [rows.where(position) for position in range(7)] == [
        f"{urls[0]}: line 3",
        f"{urls[0]}: line 5",
        f"{urls[1]}: row 1",
        f"{urls[1]}: row 2",
        f"{urls[1]}: row 3",
        f"{urls[2]}: line 1",
        f"{urls[2]}: line 4",
    ]
    problems = [
        NameProblem("asprin", "unknown head 'asprin' of type 'drug' (closest: 'aspirin')", "heads", 1),
        NameProblem("y", "", "heads", 4),
        NameProblem("z", "", "relations", 6),
    ]
    assert str(rows.located(UnknownEntityError(problems))) == (
        f"{urls[0]}: line 5: unknown head 'asprin' of type 'drug' (closest: 'aspirin'); 2 more not usable: "
        f"'y' ({urls[1]}: row 3), 'z' ({urls[2]}: line 4)"
    )
    put_text(f"{tmp_path}/short.tsv", "\n\naspirin\ttreats\n\nasprin\n")
    with pytest.raises(BadDataError) as caught:
        read_rows([f"{tmp_path}/short.tsv"], Columns(lhs=0, rhs=None, rel=1, weight=None), None, None)
    assert str(caught.value).startswith(f"{tmp_path}/short.tsv: line 5: expected at least 2 columns (-l 0, --rel-col 1")


def test_a_csv_file_is_read_with_commas_unless_a_delimiter_is_given(tmp_path: Path) -> None:
    put_text(f"{tmp_path}/q.csv", "aspirin,treats,diabetes\n")
    put_bytes(f"{tmp_path}/q.CSV.gz", gzip.compress(b"insulin,treats,asthma\n"))
    put_text(f"{tmp_path}/semi.csv", "aspirin;treats;diabetes\n")
    rows = read_rows([f"{tmp_path}/q.csv", f"{tmp_path}/q.CSV.gz"], HEAD_REL_TAIL, None, None)
    assert (rows.lhs, rows.rel, rows.rhs) == (["aspirin", "insulin"], ["treats"] * 2, ["diabetes", "asthma"])
    assert read_rows([f"{tmp_path}/semi.csv"], HEAD_REL_TAIL, ";", None).rhs == ["diabetes"]


@pytest.mark.parametrize(
    ("text", "rows", "expected"),
    [
        ("", "queries", "no queries: the file has no line, or blank ones only"),
        ("\n \n", "edges to score", "no edges to score: the file has no line, or blank ones only"),
        ("steroid\n", "queries", "line 1: expected at least 3 columns (-l 0, -r 2, --rel-col 1, 0-based) but found 1"),
    ],
)
def test_a_file_is_refused_in_the_commands_terms(tmp_path: Path, text: str, rows: str, expected: str) -> None:
    put_text(f"{tmp_path}/q.tsv", text)
    with pytest.raises(BadDataError) as caught:
        read_rows([f"{tmp_path}/q.tsv"], HEAD_REL_TAIL, None, None, rows=rows)
    assert str(caught.value).startswith(f"{tmp_path}/q.tsv: {expected}")
    flow = {"lhs": "lhs_col=", "rhs": "rhs_col=", "rel": "rel_col="}
    with pytest.raises(BadDataError, match=r"\(lhs_col=0, rhs_col=2, rel_col=1, 0-based\)"):
        put_text(f"{tmp_path}/q.tsv", "steroid\n")
        read_rows([f"{tmp_path}/q.tsv"], HEAD_REL_TAIL, None, None, labels=flow)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("out.parquet", ("parquet", None)),
        ("out.PQ", ("parquet", None)),
        ("out.csv", ("csv", None)),
        ("out.csv.gz", ("csv", "gzip")),
        ("out.tsv", ("tsv", None)),
        ("out.tsv.gz", ("tsv", "gzip")),
        ("out.tsv.gzip", ("tsv", "gzip")),
        ("out.txt.bz2", ("tsv", "bz2")),
        ("out.csv.BZ2", ("csv", "bz2")),
        ("results", ("tsv", None)),
        ("s3://b/out.parquet?versionId=1", ("parquet", None)),
    ],
)
def test_the_suffix_names_the_format(name: str, expected: tuple[str, str | None]) -> None:
    assert table_format(name) == expected


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (
            "o.txt.zst",
            ".zst is not a compression answers are written in; give Parquet (.parquet, .pq), CSV (.csv) or "
            "TSV (any other name), text compressed by .gz or .bz2 after its suffix",
        ),
        ("o.tsv.xz", ".xz is not a compression answers are written in; give Parquet"),
        ("o.csv.zip", ".zip is not a compression answers are written in; give Parquet"),
        ("o.lz4", ".lz4 is not a compression answers are written in; give Parquet"),
        ("o.parquet.gz", "a Parquet file compresses its own columns: name it .parquet or .pq, without a compression"),
    ],
)
def test_a_compression_that_is_not_written_is_refused_and_nothing_is_written(
    store_root: str, name: str, problem: str
) -> None:
    url = join(store_root, "out", name)
    before = tree_state(store_root)
    with pytest.raises(UnwritableFormat) as caught, table_output(url, 1000, None, what="prediction") as write:
        write(TABLE)
    assert str(caught.value).startswith(f"{url}: {problem}") and "\n" not in str(caught.value)
    assert changes(before, tree_state(store_root)) == []


def test_bz2_and_gzip_outputs_read_back_as_query_files(tmp_path: Path) -> None:
    """What is written compressed is read back by the readers (``--queries`` on an earlier ``--output``)."""
    for name in ("top.tsv.bz2", "top.csv.bz2", "top.tsv.gzip"):
        url = f"{tmp_path}/{name}"
        with table_output(url, 1000, None, what="prediction") as write:
            write(TABLE.slice(0, 2))
        opened = bz2.open if name.endswith(".bz2") else gzip.open
        with opened(url, "rb") as stream:
            assert stream.read().decode().splitlines()[1].split("," if ".csv" in name else "\t")[:3] == [
                "0",
                "aspirin",
                "treats",
            ]
        rows = read_rows([url], Columns(lhs=1, rhs=3, rel=2, weight=None), None, None)
        assert (rows.lhs, rows.rhs) == (["head", "aspirin", "aspirin"], ["tail", "diabetes", "asthma"])


@pytest.mark.parametrize(
    "name", ["out.tsv", "out.tsv.gz", "out.tsv.bz2", "out.csv", "out.csv.gz", "out.csv.bz2", "out.parquet"]
)
def test_a_table_written_reads_back_equal(store_root: str, name: str) -> None:
    url = join(store_root, "answers", name)
    with table_output(url, 1000, None, what="prediction") as write:
        write(TABLE)
    data = get_bytes(url)
    if name.endswith(".parquet"):
        assert pq.read_table(pa.BufferReader(data)).equals(TABLE)
        return
    text = gzip.decompress(data) if name.endswith(".gz") else bz2.decompress(data) if name.endswith(".bz2") else data
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
