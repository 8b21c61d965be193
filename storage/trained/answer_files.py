"""Files of names in, tables of answers out: what ``pbg predict --queries`` and ``pbg score`` read and write.

**In.** :func:`read_rows` reads files of queries or edges as ``pbg import`` reads edge lists
(:func:`storage.edge_lists.read.edge_batches`: TSV/CSV, ``.gz``/``.bz2``, Parquet, local or
remote; the columns a :class:`~storage.edge_lists.parse.Columns` names, a side without a column
read as absent), all of them whole, in order. A row is a query: blank lines are skipped, so
row ``N`` of a file is its ``N``-th non-blank line (the ``N``-th line if it has none).
:meth:`Rows.located` turns a model's :class:`~storage.trained.name_index.UnknownEntityError`,
which counts positions over all the rows, into the same line naming each bad name's file and row.

**Out.** A ``pyarrow.Table`` (what :meth:`storage.trained.model.Model.predict` and ``score``
return) is written by :func:`write_table` in the format its URL's suffix names
(:func:`table_format`): Parquet (``.parquet``, ``.pq``), CSV (``.csv``: RFC 4180, strings
quoted) or TSV (any other name: a header line, then one line per row, names as they are, null
as an empty field, floats in their shortest exact text); ``.gz`` after a text suffix
compresses it. TSV carries no quoting, so a name holding a tab or a line break (possible only
through a Parquet or space-separated import) is refused, naming it. :func:`table_output`
publishes one output only when written whole (:func:`storage.outputs.staged_outputs`: an
existing file refused unless ``replace``, the disk space checked first, nothing left behind on
a failure or an interrupt).
"""

from __future__ import annotations

import bisect
import contextlib
import gzip
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from pbg_core.errors import UnknownNameError
from storage.edge_lists.parse import PARQUET_SUFFIXES, Columns, RawBatch, ReadSpec
from storage.edge_lists.read import edge_batches
from storage.errors import BadDataError
from storage.fs.urls import StorageOptions
from storage.outputs import staged_outputs
from storage.trained.name_index import NameProblem, UnknownEntityError

TEXT_ROWS = 1 << 16  # rows formatted at once when writing text
ROW_BYTES = 48  # about the bytes of a row beside its names (query, rank, score, separators)
SIDES = ("lhs", "rhs", "rel")


class Writable(Protocol):
    """Where text is written: a binary file, a gzip stream, stdout's buffer."""

    def write(self, data: bytes, /) -> int:
        """Write ``data``; the number of bytes written."""
        ...


@dataclass(frozen=True)
class Rows:
    """The rows of some files, column by column, and where each came from.

    Attributes:
        lhs, rhs, rel: Each row's head, tail and relation name; None where no column was read.
        files: Each file as given, in order, with its number of rows.
    """

    lhs: list[str] | None
    rhs: list[str] | None
    rel: list[str] | None
    files: list[tuple[str, int]]

    def __len__(self) -> int:
        return sum(count for _, count in self.files)

    def where(self, position: int) -> str:
        """``q.tsv row 17``: the file and row (1-based) of the row at ``position`` (0-based, over all files)."""
        ends = [0]
        for _, count in self.files:
            ends.append(ends[-1] + count)
        index = bisect.bisect_right(ends, position) - 1
        return f"{self.files[index][0]} row {position - ends[index] + 1}"

    def located(self, err: UnknownEntityError) -> UnknownNameError:
        """``err``'s one line, each bad name placed by file and row instead of by list position."""

        def place(problem: NameProblem) -> str:
            return self.where(problem.position) if problem.position is not None else problem.where()

        return UnknownNameError(err.message(place))


def read_rows(urls: Sequence[str], columns: Columns, delimiter: str | None, storage_options: StorageOptions) -> Rows:
    """Every row of ``urls``, in order, the columns ``columns`` names read as names.

    Raises:
        DataNotFound: a file does not exist.
        BadDataError: a malformed line or row, a missing column, a file without rows, or a
            truncated or corrupt compressed or Parquet file (each naming the file, and the line
            or row).
    """
    spec = ReadSpec(columns=columns, delimiter=delimiter)
    read: dict[str, list[pa.Array]] = {side: [] for side in SIDES}
    files = []
    for url in urls:
        batches: list[RawBatch] = []
        for batch in edge_batches(url, spec, storage_options, on_restart=batches.clear):
            batches.append(batch)
        for side in SIDES:
            read[side] += [getattr(batch, side) for batch in batches if getattr(batch, side) is not None]
        files.append((url, sum(len(batch) for batch in batches)))
    names = {
        side: pa.concat_arrays([a.cast(pa.string()) for a in arrays]).to_pylist() if arrays else None
        for side, arrays in read.items()
    }
    return Rows(names["lhs"], names["rhs"], names["rel"], files)


def table_format(url: str) -> tuple[str, bool]:
    """The format ``url``'s suffix names (``parquet``, ``csv`` or ``tsv``) and whether text is gzipped."""
    name = url.split("?", 1)[0].lower()
    compressed = name.endswith(".gz")
    name = name.removesuffix(".gz")
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet", False
    return ("csv" if name.endswith(".csv") else "tsv"), compressed


def estimated_bytes(rows: int, name_bytes: int) -> int:
    """About the bytes of ``rows`` rows holding ``name_bytes`` bytes of names each (text; Parquet takes less)."""
    return rows * (name_bytes + ROW_BYTES)


@contextlib.contextmanager
def table_output(
    url: str, size: int, storage_options: StorageOptions, *, what: str, replace: bool = False
) -> Iterator[Callable[[pa.Table], None]]:
    """A function writing a table to ``url``, which is published only if the block succeeds.

    Args:
        url: The output, local or remote; its format by suffix (:func:`table_format`).
        size: About its bytes, checked against the free space.
        storage_options: Filesystem keyword arguments.
        what: The command's noun in messages (``prediction``: "refusing to overwrite prediction output(s)").
        replace: Publish over an existing file (refused otherwise).

    Raises:
        OutputExistsError: ``url`` exists and not ``replace``, or is a directory.
        NoSpaceForOutput: its disk has less room than ``size``, or filled up while it was written.
    """
    with staged_outputs({url: size}, storage_options, what=what, replace=replace) as staging:
        yield lambda table: write_table(table, staging.path(url), url)


def write_table(table: pa.Table, path: str, url: str) -> None:
    """Write ``table`` to the local file ``path`` in the format ``url`` names (see the module docstring).

    Raises:
        BadDataError: a TSV output, and a name holding a tab or a line break.
    """
    kind, compressed = table_format(url)
    if kind == "parquet":
        pq.write_table(table, path)
        return
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if compressed else raw as stream:
        if kind == "csv":
            pa_csv.write_csv(table, stream, pa_csv.WriteOptions(quoting_style="needed"))
        else:
            write_tsv(table, stream, url)


def write_tsv(table: pa.Table, stream: Writable, url: str) -> None:
    """``table`` as TSV on ``stream``: a header line, then a line per row (see the module docstring).

    Raises:
        BadDataError: a string holding a tab or a line break (``url`` named).
    """
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            bad = column.filter(pc.match_substring_regex(column, "[\t\n\r]")).drop_null()
            if len(bad):
                raise BadDataError(
                    url,
                    f"{name} {bad[0].as_py()!r} holds a tab or a line break, which a TSV line cannot carry; "
                    "write Parquet (.parquet) or CSV (.csv) instead",
                )
    stream.write(("\t".join(table.column_names) + "\n").encode())
    for start in range(0, table.num_rows, TEXT_ROWS):
        block = table.slice(start, TEXT_ROWS)
        texts = [pc.cast(column, pa.string()).fill_null("") for column in block.columns]
        lines = pc.binary_join_element_wise(*texts, "\t")
        stream.write("".join(f"{line}\n" for line in lines.to_pylist()).encode())


__all__ = ["Rows", "estimated_bytes", "read_rows", "table_format", "table_output", "write_table", "write_tsv"]
