"""storage.edge_lists.read: the reader chosen per file, the restart on the slow path, one side optional."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from store_io import join, put_bytes

from storage.edge_lists.parse import Columns, RawBatch, ReadSpec
from storage.edge_lists.read import edge_batches
from storage.errors import BadDataError

EDGES = [("a", "r", "b"), ("noël", "s", "名"), ("c", "r", "a")]
TEXT = "".join(f"{lhs}\t{rel}\t{rhs}\n" for lhs, rel, rhs in EDGES).encode()


class Restarts:
    """An ``on_restart`` that counts its calls and how many batches the reader had yielded by then."""

    def __init__(self) -> None:
        self.batches: list[RawBatch] = []
        self.at: list[int] = []

    def __call__(self) -> None:
        self.at.append(len(self.batches))

    def read(self, url: str, spec: ReadSpec) -> list[RawBatch]:
        for batch in edge_batches(url, spec, None, self):
            self.batches.append(batch)
        return self.batches


def column(batches: list[RawBatch], side: str) -> list[str]:
    return [name for batch in batches for name in getattr(batch, side).to_pylist()]


def test_text_on_the_fast_path_local_and_on_s3(store_root: str) -> None:
    url = join(store_root, "in", "edges.tsv")
    put_bytes(url, TEXT)
    restarts = Restarts()
    batches = restarts.read(url, ReadSpec(Columns(0, 2, 1, None)))
    assert restarts.at == []  # never restarted
    assert list(zip(column(batches, "lhs"), column(batches, "rel"), column(batches, "rhs"), strict=True)) == EDGES


def test_a_delimiter_the_fast_path_cannot_take_is_read_slowly_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "edges.txt"
    path.write_bytes(TEXT.replace(b"\t", b"::"))
    restarts = Restarts()
    batches = restarts.read(str(path), ReadSpec(Columns(0, 2, 1, None), delimiter="::"))
    assert restarts.at == [0]  # restarted before the first batch
    assert column(batches, "lhs") == ["a", "noël", "c"] and column(batches, "rhs") == ["b", "名", "a"]


def test_a_file_without_edges_restarts_after_what_the_fast_path_gave_and_is_refused(tmp_path: Path) -> None:
    """The fast path yields the blank lines it counted; the restart lets the caller drop them."""
    path = tmp_path / "blank.tsv"
    path.write_bytes(b"\n  \n\t\t\n")
    restarts = Restarts()
    with pytest.raises(BadDataError, match=r"blank.tsv: line 1: expected an edge per line, the file has no edges"):
        restarts.read(str(path), ReadSpec(Columns(0, 2, 1, None)))
    assert len(restarts.at) == 1 and restarts.at[0] >= 1
    assert all(len(batch) == 0 for batch in restarts.batches[: restarts.at[0]])


def test_parquet_is_read_by_column_name(tmp_path: Path) -> None:
    path = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"src": ["a", "noël", "c"], "rel": ["r", "s", "r"], "dst": ["b", "名", "a"]}), path)
    restarts = Restarts()
    batches = restarts.read(str(path), ReadSpec(Columns("src", "dst", "rel", None)))
    assert restarts.at == [] and column(batches, "rhs") == ["b", "名", "a"]


@pytest.mark.parametrize("form", ["tsv", "slow", "parquet"])
def test_queries_without_a_tail_column_are_read_in_every_form(tmp_path: Path, form: str) -> None:
    """(head, relation) rows: the rhs of every batch is None, a row with every read column empty is blank."""
    rows = [("a", "r"), ("", ""), ("noël", "s")]
    if form == "parquet":
        path = tmp_path / "queries.parquet"
        pq.write_table(pa.table({"head": [h for h, _ in rows], "rel": [r for _, r in rows]}), path)
        spec = ReadSpec(Columns("head", None, "rel", None), skip_bad_lines=True)
    else:
        delimiter = "\t" if form == "tsv" else "::"  # "::": the slow path from the start
        path = tmp_path / "queries.tsv"
        path.write_text("".join(f"{h}{delimiter}{r}\n" for h, r in rows))
        spec = ReadSpec(Columns(0, None, 1, None), delimiter=delimiter)
    batches = Restarts().read(str(path), spec)
    assert all(batch.rhs is None for batch in batches)
    assert column(batches, "lhs") == ["a", "noël"] and column(batches, "rel") == ["r", "s"]
    if form != "parquet":  # Parquet has no blank rows: an empty id there is a malformed row
        assert sum(batch.blank for batch in batches) == 1
    assert sum(len(batch) for batch in batches) == 2


def test_a_truncated_gzip_is_named_whichever_reader_meets_it(tmp_path: Path) -> None:
    path = tmp_path / "edges.tsv.gz"
    path.write_bytes(gzip.compress(TEXT * 1000)[:-50])
    with pytest.raises(BadDataError, match=r"edges.tsv.gz: truncated or corrupt compressed file"):
        Restarts().read(str(path), ReadSpec(Columns(0, 2, 1, None)))
