"""storage.edge_lists.parse: column specs, compression by URL, corrupt-input errors, delimiter detection."""

from __future__ import annotations

import bz2
import errno
import gzip
from pathlib import Path

import pytest

from storage.edge_lists.parse import (
    Columns,
    ReadSpec,
    compression_of,
    decoding_errors,
    detect_delimiter,
    expected_relations,
    is_parquet,
    open_binary,
)
from storage.errors import BadDataError


def test_columns_ids_needed_and_describe() -> None:
    cols = Columns(lhs=0, rhs=2, rel=1, weight=4)
    assert cols.ids() == [("lhs", 0), ("rhs", 2), ("rel", 1)]
    assert cols.needed == 5
    assert Columns(0, 1, None, None).describe() == "lhs=0, rhs=1"
    assert Columns("src", "dst", None, "w").ids() == [("lhs", "src"), ("rhs", "dst")]
    queries = Columns(lhs=3, rhs=None, rel=0, weight=None)  # (head, relation): no tail column
    assert (queries.ids(), queries.needed, queries.describe()) == ([("lhs", 3), ("rel", 0)], 4, "lhs=3, rel=0")


def test_a_read_spec_reads_an_id_column_and_checks_relations_only_with_theirs() -> None:
    with pytest.raises(ValueError, match="at least one of its lhs, rhs or rel columns"):
        ReadSpec(Columns(None, None, None, 2))
    with pytest.raises(ValueError, match="need a rel column"):
        ReadSpec(Columns(0, 1, None, None), relations=frozenset({"r"}))
    assert ReadSpec(Columns(None, 1, None, None)).columns.ids() == [("rhs", 1)]


@pytest.mark.parametrize(
    ("url", "want"),
    [("s3://b/e.tsv.gz", "gzip"), ("E.TSV.GZIP", "gzip"), ("e.txt.bz2", "bz2"), ("e.tsv", None), ("gz", None)],
)
def test_compression_is_decided_by_the_url(url: str, want: str | None) -> None:
    assert compression_of(url) == want


def test_parquet_by_suffix() -> None:
    assert is_parquet("s3://b/E.PARQUET") and is_parquet("x.pq") and not is_parquet("x.parquet.gz")


@pytest.mark.parametrize(("suffix", "opener"), [(".gz", gzip.open), (".bz2", bz2.open), ("", open)])
def test_open_binary_decompresses_by_url_not_by_local_name(tmp_path: Path, suffix: str, opener: object) -> None:
    local = tmp_path / "cache-entry-without-suffix"
    with opener(local, "wb") as out:  # one of three openers
        out.write(b"a\tb\n")
    with open_binary(str(local), f"s3://b/edges.tsv{suffix}") as lines:
        assert lines.read() == b"a\tb\n"


def test_a_truncated_gzip_is_bad_data_naming_the_url(tmp_path: Path) -> None:
    local = tmp_path / "e.tsv.gz"
    local.write_bytes(gzip.compress(b"a\tb\n" * 1000)[:-20])
    url = "s3://b/e.tsv.gz"
    with (
        pytest.raises(BadDataError, match="truncated or corrupt compressed file") as caught,
        decoding_errors(url),
        open_binary(str(local), url) as lines,
    ):
        lines.read()
    assert "s3://b/e.tsv.gz" in str(caught.value)


def test_disk_errors_and_plain_files_pass_through_decoding_errors() -> None:
    with pytest.raises(OSError) as caught, decoding_errors("e.tsv.gz"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert not isinstance(caught.value, BadDataError)
    with pytest.raises(OSError, match="Truncated"), decoding_errors("e.tsv"):
        raise OSError("Truncated compressed stream")
    with pytest.raises(BadDataError, match="truncated or corrupt Parquet file"), decoding_errors("e.parquet"):
        raise OSError("Truncated compressed stream")


@pytest.mark.parametrize(
    ("text", "want"), [(b"\n  \na\tb c\n", "\t"), (b"a b c\nd\te\n", " "), (b"", "\t"), (b"\n\n", "\t")]
)
def test_delimiter_is_tab_if_the_first_non_blank_line_has_one_else_space(
    tmp_path: Path, text: bytes, want: str
) -> None:
    local = tmp_path / "e.tsv"
    local.write_bytes(text)
    assert detect_delimiter(str(local), "e.tsv", None) == want
    assert detect_delimiter(str(local), "e.tsv", ",") == ","


def test_expected_relations_lists_sorted_names_and_cuts_long_lists() -> None:
    assert expected_relations(frozenset({"b", "a"})) == "expected one of 'a', 'b'"
    many = frozenset(f"r{i:02}" for i in range(12))
    assert expected_relations(many, shown=2) == "expected one of 'r00', 'r01', ... (12 in all)"
