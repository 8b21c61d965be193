"""Reading one edge-list input: what a line means, the batches every reader yields, opening files.

**What a text line means** (both text readers agree on it). Lines end with ``\\n`` or ``\\r\\n``.
A line is split on the delimiter; ``delimiter=None`` picks, per file, a tab if the first
non-blank line contains one and a single space otherwise (PBG split on any run of whitespace;
runs of spaces now read as empty columns and are reported). A line is

- *blank* (skipped, counted) if it is only whitespace or all its id columns are empty;
- *malformed* if it has fewer columns than the largest index asked for, an empty name in an
  id column, a weight that is not a finite number, or bytes in a read column that are not
  UTF-8. A malformed line raises :class:`BadDataError` naming the file and line, or is
  skipped and listed with ``skip_bad_lines``.

Three readers yield :class:`RawBatch` batches: :mod:`storage.edge_lists.text_fast` (pyarrow over blocks
of lines), :mod:`storage.edge_lists.text_slow` (Python line by line, the authority that names a
malformed line) and :mod:`storage.edge_lists.parquet`. :func:`storage.edge_lists.read.edge_batches`
picks one per input.

A batch may also carry each edge's number (:attr:`ReadSpec.numbered`): its physical line in a
text file (1-based, blank lines counted, the line an error about it names) or its row in a
Parquet file, so that a caller reporting a bad name later points at the same line. A command
reading files of names (``pbg predict --queries``) words its errors in its own terms
(:attr:`ReadSpec.rows`, :attr:`ReadSpec.labels`: "no queries", "-l 3").

Which columns are read is :class:`Columns`: an import reads both entity columns (its options,
:class:`storage.edge_columns.EdgeColumns`, require them), while a file of queries may lack one
side (``(head, relation)`` rows have no tail): a side without a column is None in every batch.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, NamedTuple, cast

import numpy as np
import pyarrow as pa

from storage.edge_columns import Column
from storage.errors import BadDataError

PARQUET_SUFFIXES = (".parquet", ".pq")


class Columns(NamedTuple):
    """Where the fields of an edge are: 0-based indices (text or Parquet) or names (Parquet); None: not read."""

    lhs: Column | None
    rhs: Column | None
    rel: Column | None
    weight: Column | None

    def ids(self) -> list[tuple[str, Column]]:
        """(field, column) of the id columns given, in the order lhs, rhs, rel."""
        return [(n, c) for n, c in zip(("lhs", "rhs", "rel"), self[:3], strict=True) if c is not None]

    @property
    def needed(self) -> int:
        """How many columns a text line must have."""
        return 1 + max((c for c in self if isinstance(c, int)), default=-1)

    def describe(self, labels: Mapping[str, str] | None = None) -> str:
        """E.g. ``lhs=0, rhs=2, rel=1`` (for error messages); ``labels``: how each field's column is
        given instead of ``lhs=`` (a command's option: ``{"lhs": "-l "}`` gives ``-l 0``)."""
        shown = labels or {}
        return ", ".join(
            f"{shown.get(n, n + '=')}{c}" for n, c in zip(self._fields, self, strict=True) if c is not None
        )


@dataclass(frozen=True)
class ReadSpec:
    """How to read every input of one import."""

    columns: Columns
    delimiter: str | None = None
    skip_bad_lines: bool = False
    # Relation names a line may carry; None: any (unknown ones are skipped later and counted).
    relations: frozenset[str] | None = None
    block_bytes: int = 8 << 20  # text per fast-path batch (one more is parsed ahead); 16 MiB: +230 MB peak, no faster
    # Each edge's line (text) or row (Parquet) number in RawBatch.numbers; a text block holding a
    # blank line is then read by the slow path, which counts lines one by one.
    numbered: bool = False
    # What the rows are called and each column's option, in messages: None and {} for an edge
    # list ("expected an edge per line", "lhs=3"); a command's ("no queries", "-l 3") otherwise.
    rows: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse a spec that reads no id column (every row would be blank), or checks relations without their column."""
        if not self.columns.ids():
            raise ValueError(f"an edge list is read by at least one of its lhs, rhs or rel columns, got {self.columns}")
        if self.relations is not None and self.columns.rel is None:
            raise ValueError("the relation names a line may carry need a rel column, got none")


@dataclass
class RawBatch:
    """Some consecutive edges of one input, as columns of strings (and float32 weights); a column not read is None."""

    lhs: pa.Array | None
    rhs: pa.Array | None
    rel: pa.Array | None
    weight: np.ndarray | None
    lines: int  # input lines covered (edges + blank + skipped malformed), for progress
    blank: int = 0
    bad: list[str] = field(default_factory=list)  # "line N: problem" (skip_bad_lines only)
    numbers: np.ndarray | None = None  # each edge's 1-based line (text) or row (Parquet) number (ReadSpec.numbered)

    def __len__(self) -> int:
        column = next(c for c in (self.lhs, self.rhs, self.rel) if c is not None)  # a ReadSpec reads one at least
        return len(column)


class FastPathAnomaly(Exception):
    """The fast path met something it does not judge; re-read the file with the slow path."""


def is_parquet(url: str) -> bool:
    """Whether ``url`` names a Parquet file (by suffix)."""
    return url.lower().endswith(PARQUET_SUFFIXES)


def compression_of(url: str) -> str | None:
    """``"gzip"``, ``"bz2"`` or None, from the input's URL.

    Decided on the URL, never on the local path: a remote input is read from a read-cache
    entry whose name has no suffix.
    """
    lower = url.lower()
    if lower.endswith((".gz", ".gzip")):
        return "gzip"
    if lower.endswith(".bz2"):
        return "bz2"
    return None


def open_binary(path: str, url: str) -> IO[bytes]:
    """``path`` (the local copy of ``url``) opened for reading bytes, decompressing ``.gz`` / ``.bz2``."""
    compression = compression_of(url)
    if compression == "gzip":
        return cast(IO[bytes], gzip.open(path, "rb"))  # a GzipFile: reads bytes, typeshed does not call it IO
    if compression == "bz2":
        return bz2.open(path, "rb")
    return open(path, "rb")


COMPRESSED_SUFFIXES = (".gz", ".gzip", ".bz2")


@contextlib.contextmanager
def decoding_errors(url: str) -> Iterator[None]:
    """Report a truncated or corrupt ``.gz``/``.bz2``/Parquet input as a :class:`BadDataError` naming it.

    gzip, bz2, zlib and pyarrow each fail their own way on a cut-off download (EOFError,
    zlib.error, ``OSError('Truncated compressed stream')`` without an errno, ArrowInvalid);
    an OSError that carries an errno is about the disk, not the content, and passes through.
    """
    lower = url.lower()
    try:
        yield
    except (EOFError, zlib.error, gzip.BadGzipFile) as err:
        raise BadDataError(
            url, f"truncated or corrupt compressed file ({_first_line(err)}); download or write it again"
        ) from err
    except OSError as err:
        if err.errno is not None or not lower.endswith(COMPRESSED_SUFFIXES + PARQUET_SUFFIXES):
            raise
        raise BadDataError(
            url,
            f"truncated or corrupt {'Parquet' if is_parquet(url) else 'compressed'} file "
            f"({_first_line(err)}); download or write it again",
        ) from err
    except pa.ArrowInvalid as err:
        if not is_parquet(url):
            raise
        raise BadDataError(url, f"not a readable Parquet file ({_first_line(err)})") from err


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200]}" if text else type(err).__name__


def detect_delimiter(path: str, url: str, delimiter: str | None) -> str:
    """``delimiter``, or for None: tab if the first non-blank line has one, else a space."""
    if delimiter is not None:
        return delimiter
    with open_binary(path, url) as lines:
        for line in lines:
            if line.strip():
                return "\t" if b"\t" in line else " "
    return "\t"


def no_rows(spec: ReadSpec, parquet: bool) -> str:
    """The problem of an input without any row: an edge list's (``line 1: expected an edge per line, ...``),
    or ``no queries: ...`` naming ``spec.rows``."""
    if spec.rows is None:
        return (
            "row 1: expected an edge per row, the file has no rows"
            if parquet
            else "line 1: expected an edge per line, the file has no edges"
        )
    return f"no {spec.rows}: the file has {'0 rows' if parquet else 'no line, or blank ones only'}"


def expected_relations(relations: frozenset[str], shown: int = 10) -> str:
    """``expected one of 'a', 'b', ...`` for a message about an unknown relation name."""
    names = sorted(relations)
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return "expected one of " + ", ".join(map(repr, names[:shown])) + more
