"""Files of names in, tables of answers out: what ``pbg predict --queries`` and ``pbg score`` read and write.

**In.** :func:`read_rows` reads files of queries or edges as ``pbg import`` reads edge lists
(:func:`storage.edge_lists.read.edge_batches`: TSV/CSV, ``.gz``/``.bz2``, Parquet, local or
remote; the columns a :class:`~storage.edge_lists.parse.Columns` names, a side without a column
read as absent), all of them whole, in order, with one difference: a ``.csv`` file (``.csv.gz``,
``.csv.bz2``) without a delimiter given is read with ``,`` (``pbg import`` takes a tab or a space
there too). Blank lines are skipped, and each row keeps its place in its file: the physical line
of a text file (blank lines counted, as an editor numbers them), the row of a Parquet file. The
readers' own errors name that line (``q.tsv: line 5: expected at least 3 columns (-l 0, -r 2,
--rel-col 1, 0-based) ...``, ``q.tsv: no queries: ...``), and :meth:`Rows.located` turns a
model's :class:`~storage.trained.name_index.UnknownEntityError`, which counts positions over all
the rows, into the same line naming each bad name's file and line (``q.tsv: line 5: unknown head
...``).

**Out.** A ``pyarrow.Table`` (what :meth:`storage.trained.model.Model.predict` and ``score``
return) is written by :func:`write_table` in the format its URL's suffix names
(:func:`table_format`): Parquet (``.parquet``, ``.pq``), CSV (``.csv``: RFC 4180; strings are
quoted only if one holds a comma, a quote or a line break, so that plain names read back as
queries, the readers removing no quotes) or TSV (any other name: a header line, then one line per row, names as they are, null
as an empty field, floats in their shortest exact text); ``.gz`` (``.gzip``) or ``.bz2`` after a
text suffix compresses it, as the readers read them back. Any other compression suffix
(``.zst``, ``.xz``, ``.zip``, ...) and a compressed Parquet name are refused rather than written
as plain bytes under that name. TSV carries no quoting, so a name holding a tab or a line break
(possible only through a Parquet or space-separated import) is refused, naming it.
:func:`table_output` publishes one output only when written whole
(:func:`storage.outputs.staged_outputs`: an existing file refused unless ``replace``, a missing
directory created as ``pbg export`` creates one, the disk space checked first, nothing left
behind on a failure or an interrupt).
"""

from __future__ import annotations

import bisect
import bz2
import contextlib
import gzip
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Protocol, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from pbg_core.errors import UnknownNameError
from storage.edge_lists.parse import PARQUET_SUFFIXES, Columns, RawBatch, ReadSpec, is_parquet
from storage.edge_lists.read import edge_batches
from storage.errors import BadDataError, StorageError
from storage.fs.urls import StorageOptions
from storage.outputs import staged_outputs
from storage.trained.name_index import NameProblem, UnknownEntityError

TEXT_ROWS = 1 << 16  # rows formatted at once when writing text
ROW_BYTES = 48  # about the bytes of a row beside its names (query, rank, score, separators)
SIDES = ("lhs", "rhs", "rel")
CLI_COLUMNS = {"lhs": "-l ", "rhs": "-r ", "rel": "--rel-col "}  # how the commands' options give each column
WRITTEN_COMPRESSIONS = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2"}  # what the readers read back
OTHER_COMPRESSIONS = (".zst", ".zstd", ".xz", ".lzma", ".lz4", ".lz", ".zip", ".z", ".br", ".7z", ".sz", ".snappy")
ALLOWED_OUTPUTS = (
    "Parquet (.parquet, .pq), CSV (.csv) or TSV (any other name), text compressed by .gz or .bz2 after its suffix"
)


class UnwritableFormat(StorageError, ValueError):
    """An output name whose suffix asks for a format or compression that is not written (``.zst``, ``.parquet.gz``)."""


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
        numbers: Each row's place in its file: its physical line (text, 1-based, blank lines
            counted) or its row (Parquet, 1-based); empty for rows not read from files.
    """

    lhs: list[str] | None
    rhs: list[str] | None
    rel: list[str] | None
    files: list[tuple[str, int]]
    numbers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return sum(count for _, count in self.files)

    def where(self, position: int) -> str:
        """``q.tsv: line 17`` (``row 17`` of a Parquet file): where the row at ``position`` (0-based, over all files) is."""
        ends = [0]
        for _, count in self.files:
            ends.append(ends[-1] + count)
        index = bisect.bisect_right(ends, position) - 1
        url = self.files[index][0]
        number = int(self.numbers[position]) if len(self.numbers) else position - ends[index] + 1
        return f"{url}: {'row' if is_parquet(url) else 'line'} {number}"

    def located(self, err: UnknownEntityError) -> UnknownNameError:
        """``err``'s one line, each bad name placed by file and line instead of by list position."""

        def place(problem: NameProblem) -> str:
            return self.where(problem.position) if problem.position is not None else problem.where()

        return UnknownNameError(err.message(place))


def read_rows(
    urls: Sequence[str],
    columns: Columns,
    delimiter: str | None,
    storage_options: StorageOptions,
    *,
    rows: str = "rows",
    labels: Mapping[str, str] = CLI_COLUMNS,
) -> Rows:
    """Every row of ``urls``, in order, the columns ``columns`` names read as names.

    Args:
        urls: The files, local or remote.
        columns: Which columns are read.
        delimiter: The column separator of text files; None: ``,`` for a ``.csv`` file, else a
            tab if its first line has one, else a space.
        storage_options: Filesystem keyword arguments.
        rows: What the rows are, for a file without any (``queries``: "no queries").
        labels: How each column was given, for a message about it (``-l ``: "-l 3").

    Raises:
        DataNotFound: a file does not exist.
        BadDataError: a malformed line or row, a missing column, a file without rows, or a
            truncated or corrupt compressed or Parquet file (each naming the file, and the line
            or row).
    """
    read: dict[str, list[pa.Array]] = {side: [] for side in SIDES}
    numbers: list[np.ndarray] = []
    files = []
    for url in urls:
        spec = ReadSpec(columns=columns, delimiter=_delimiter(url, delimiter), numbered=True, rows=rows, labels=labels)
        batches: list[RawBatch] = []
        for batch in edge_batches(url, spec, storage_options, on_restart=batches.clear):
            batches.append(batch)
        for side in SIDES:
            read[side] += [getattr(batch, side) for batch in batches if getattr(batch, side) is not None]
        numbers += [batch.numbers for batch in batches if batch.numbers is not None]
        files.append((url, sum(len(batch) for batch in batches)))
    names = {
        side: pa.concat_arrays([a.cast(pa.string()) for a in arrays]).to_pylist() if arrays else None
        for side, arrays in read.items()
    }
    at = np.concatenate(numbers) if numbers else np.zeros(0, np.int64)
    return Rows(names["lhs"], names["rhs"], names["rel"], files, at)


def _delimiter(url: str, delimiter: str | None) -> str | None:
    """``delimiter``, or for None ``,`` if ``url`` names a CSV file (compressed or not), else None (detected)."""
    if delimiter is not None:
        return delimiter
    name = url.split("?", 1)[0].lower()
    for suffix in WRITTEN_COMPRESSIONS:
        name = name.removesuffix(suffix)
    return "," if name.endswith(".csv") else None


def table_format(url: str) -> tuple[str, str | None]:
    """The format ``url``'s suffix names (``parquet``, ``csv`` or ``tsv``) and the text's compression (``gzip``, ``bz2``).

    Raises:
        UnwritableFormat: a compression suffix other than ``.gz``/``.gzip``/``.bz2``, or one after a Parquet name.
    """
    name = url.split("?", 1)[0].lower()
    compression = next((how for suffix, how in WRITTEN_COMPRESSIONS.items() if name.endswith(suffix)), None)
    if compression is not None:
        name = name.rsplit(".", 1)[0]
    other = next((suffix for suffix in OTHER_COMPRESSIONS if name.endswith(suffix)), None)
    if other is not None:
        raise UnwritableFormat(url, f"{other} is not a compression answers are written in; give {ALLOWED_OUTPUTS}")
    if name.endswith(PARQUET_SUFFIXES):
        if compression is not None:
            raise UnwritableFormat(
                url, "a Parquet file compresses its own columns: name it .parquet or .pq, without a compression suffix"
            )
        return "parquet", None
    return ("csv" if name.endswith(".csv") else "tsv"), compression


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
        UnwritableFormat: ``url``'s suffix names a format or compression not written (:func:`table_format`).
        OutputExistsError: ``url`` exists and not ``replace``, or is a directory.
        NoSpaceForOutput: its disk has less room than ``size``, or filled up while it was written.
    """
    table_format(url)
    with staged_outputs({url: size}, storage_options, what=what, replace=replace) as staging:
        yield lambda table: write_table(table, staging.path(url), url)


def write_table(table: pa.Table, path: str, url: str) -> None:
    """Write ``table`` to the local file ``path`` in the format ``url`` names (see the module docstring).

    Raises:
        BadDataError: a TSV output, and a name holding a tab or a line break.
    """
    kind, compression = table_format(url)
    if kind == "parquet":
        pq.write_table(table, path)
        return
    with open(path, "wb") as raw, _compressed(raw, compression) as stream:
        if kind == "csv":
            quoting = "needed" if _needs_quotes(table) else "none"
            stream.write((",".join(table.column_names) + "\n").encode())  # pyarrow would quote it
            pa_csv.write_csv(table, stream, pa_csv.WriteOptions(include_header=False, quoting_style=quoting))
        else:
            write_tsv(table, stream, url)


def _needs_quotes(table: pa.Table) -> bool:
    """Whether a string of ``table`` holds a comma, a quote or a line break (CSV then quotes every string)."""
    return any(
        pc.any(pc.match_substring_regex(column, '[,"\r\n]')).as_py()
        for column in table.columns
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    )


def _compressed(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    """``raw``, or a stream compressing into it (``gzip`` without a timestamp: one table, one file's bytes)."""
    # GzipFile and BZ2File write bytes; typeshed does not call them IO.
    if compression == "gzip":
        return cast(IO[bytes], gzip.GzipFile(fileobj=raw, mode="wb", mtime=0))
    if compression == "bz2":
        return cast(IO[bytes], bz2.BZ2File(raw, mode="wb"))
    return raw


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


__all__ = [
    "CLI_COLUMNS",
    "Rows",
    "UnwritableFormat",
    "estimated_bytes",
    "read_rows",
    "table_format",
    "table_output",
    "write_table",
    "write_tsv",
]
