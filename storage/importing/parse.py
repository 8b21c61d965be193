"""Reading one edge-list input as column batches: delimited text (plain, .gz, .bz2) and Parquet.

**What a text line means** (both paths below agree on it). Lines end with ``\\n`` or ``\\r\\n``.
A line is split on the delimiter; ``delimiter=None`` picks, per file, a tab if the first
non-blank line contains one and a single space otherwise (PBG split on any run of whitespace;
runs of spaces now read as empty columns and are reported). A line is

- *blank* (skipped, counted) if it is only whitespace or all its id columns are empty;
- *malformed* if it has fewer columns than the largest index asked for, an empty name in an
  id column, a weight that is not a finite number, or bytes in a read column that are not
  UTF-8. A malformed line raises :class:`BadDataError` naming the file and line, or is
  skipped and listed with ``skip_bad_lines``.

**Fast path** (:func:`fast_batches`): ``pyarrow.csv.read_csv`` on blocks of whole lines, parsed
one block ahead in a background thread, multi-threaded inside a block, no quoting. It never
judges a line: a block with anything unusual (a row with another column count, an empty name, a
conversion or UTF-8 error, a non-finite weight) is read again by the **slow path**
(:func:`slow_block`, Python line by line, numbered from the block's first line), the authority
that names the line. So a few bad lines cost a few slow blocks, and a file whose lines have
varying column counts is valid but read slowly. The slow path reads whole files only where the
fast one cannot start (column names for a text file, no edge at all).

**Parquet** (:func:`parquet_batches`): columns by name (or 0-based index); ids of any type are
read as strings; a null or empty id or a non-finite weight is malformed (reported as ``row N``).
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import logging
import math
import zlib
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from storage.errors import BadDataError
from storage.importing.prefetch import prefetched

logger = logging.getLogger(__name__)

SLOW_BATCH_ROWS = 65_536  # rows per batch on the slow path
_PARSE_CHUNK = 1 << 20  # bytes per pyarrow parse task inside a block (both cores share a block)
_BLANK_SCAN = 1 << 16  # bytes searched for leading blank lines of a block
PARQUET_SUFFIXES = (".parquet", ".pq")

Column = int | str  # a 0-based index, or a column name (Parquet)


class Columns(NamedTuple):
    """Where the fields of an edge are: 0-based indices (text or Parquet) or names (Parquet)."""

    lhs: Column
    rhs: Column
    rel: Column | None
    weight: Column | None

    def ids(self) -> list[tuple[str, Column]]:
        """(field, column) of the id columns: lhs, rhs and rel if given."""
        return [(n, c) for n, c in zip(("lhs", "rhs", "rel"), self[:3]) if c is not None]

    @property
    def needed(self) -> int:
        """How many columns a text line must have."""
        return 1 + max(c for c in self if isinstance(c, int))

    def describe(self) -> str:
        """E.g. ``lhs=0, rhs=2, rel=1`` (for error messages)."""
        return ", ".join(f"{n}={c}" for n, c in zip(self._fields, self) if c is not None)


@dataclass(frozen=True)
class ReadSpec:
    """How to read every input of one import."""

    columns: Columns
    delimiter: str | None = None
    skip_bad_lines: bool = False
    # Relation names a line may carry; None: any (unknown ones are skipped later and counted).
    relations: frozenset[str] | None = None
    block_bytes: int = 8 << 20  # text per fast-path batch (one more is parsed ahead); 16 MiB: +230 MB peak, no faster


@dataclass
class RawBatch:
    """Some consecutive edges of one input, as columns of strings (and float32 weights)."""

    lhs: pa.Array
    rhs: pa.Array
    rel: pa.Array | None
    weight: np.ndarray | None
    lines: int  # input lines covered (edges + blank + skipped malformed), for progress
    blank: int = 0
    bad: list[str] = field(default_factory=list)  # "line N: problem" (skip_bad_lines only)

    def __len__(self) -> int:
        return len(self.lhs)


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
        return gzip.open(path, "rb")
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
        raise BadDataError(url, f"truncated or corrupt compressed file ({_first_line(err)}); "
                           "download or write it again") from err
    except OSError as err:
        if err.errno is not None or not lower.endswith(COMPRESSED_SUFFIXES + PARQUET_SUFFIXES):
            raise
        raise BadDataError(url, f"truncated or corrupt {'Parquet' if is_parquet(url) else 'compressed'} file "
                           f"({_first_line(err)}); download or write it again") from err
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


# -- fast path ----------------------------------------------------------------------------


def fast_batches(path: str, url: str, spec: ReadSpec, delimiter: str) -> Iterator[RawBatch]:
    """Batches of a delimited text file via pyarrow (see the module docstring).

    The file is cut into blocks of about ``spec.block_bytes`` at line ends; a background
    thread parses the next block (pyarrow, on both cores) while the caller maps this one, so
    at most three blocks are in memory whatever the file size. A block with anything unusual
    is read again line by line (:func:`slow_block`), so a few bad lines in a large file cost
    a few slow blocks, not a slow file.

    Raises:
        FastPathAnomaly: column names for a text file (the caller reads the whole file slowly).
        BadDataError: a malformed line (unless ``spec.skip_bad_lines``).
    """
    if any(not isinstance(c, int) for c in spec.columns if c is not None):
        raise FastPathAnomaly("column names need a header: only Parquet has one")
    blocks = slow = 0
    first_reason = ""
    for parsed in prefetched(_parsed_blocks(path, url, spec, delimiter), name="pbg-import-parse"):
        blocks += 1
        try:
            if parsed.batch is None:
                raise FastPathAnomaly(parsed.reason)
            out = _checked_batch(parsed.batch, spec)
        except FastPathAnomaly as why:
            slow += 1
            first_reason = first_reason or str(why)
            yield from slow_block(parsed.block, parsed.first_line, url, spec, delimiter)
            continue
        out.blank += parsed.blank
        out.lines += parsed.blank
        yield out
    if slow:
        logger.info("%s: %d of %d blocks read line by line (first: %s)", url, slow, blocks, first_reason)


@dataclass
class _Parsed:
    """One block of whole lines, parsed by pyarrow (``batch``) or not (``reason``)."""

    block: bytes
    first_line: int  # 1-based number of the block's first line in the file
    batch: pa.RecordBatch | None
    blank: int = 0
    reason: str = ""


def _parsed_blocks(path: str, url: str, spec: ReadSpec, delimiter: str) -> Iterator[_Parsed]:
    """The blocks of whole lines of ``path`` (decompressed), each parsed if pyarrow can."""
    first_line = 1
    for block in _line_blocks(path, compression_of(url), spec.block_bytes):
        try:
            batch, blank = _parse_block(block, spec, delimiter)
            yield _Parsed(block, first_line, batch, blank)
        except FastPathAnomaly as why:
            yield _Parsed(block, first_line, None, reason=str(why))
        first_line += block.count(b"\n")


def _line_blocks(path: str, compression: str | None, block_bytes: int) -> Iterator[bytes]:
    """About ``block_bytes`` of ``path`` at a time, cut after a line end (the last line gets one)."""
    with pa.input_stream(path, compression=compression) as stream:
        carry = b""
        while chunk := stream.read(block_bytes):
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                yield data[:cut] if cut < len(data) else data
        if carry:  # the last line has no line end: pyarrow cannot parse a lone such line
            yield carry + b"\n"


def _field_types(columns: Columns) -> dict[str, pa.DataType]:
    """pyarrow column name -> type of the columns read (ids as strings, the weight as float64)."""
    types = {f"f{c}": pa.string() for _, c in columns.ids()}
    if columns.weight is not None:
        types[f"f{columns.weight}"] = pa.float64()
    return types


def _parse_block(block: bytes, spec: ReadSpec, delimiter: str) -> tuple[pa.RecordBatch, int]:
    """Parse whole lines; leading blank lines are counted and cut first (pyarrow takes the
    column count from the first line)."""
    types = _field_types(spec.columns)
    start, blank = _leading_blank_lines(block)
    if start == len(block):
        return _empty_batch(types), blank
    blank_rows = [0]

    def on_invalid(row: pa_csv.InvalidRow) -> str:
        if row.text.strip():
            return "error"  # surfaces as ArrowInvalid below
        blank_rows[0] += 1
        return "skip"

    try:
        table = pa_csv.read_csv(
            pa.BufferReader(pa.py_buffer(block)[start:]),
            read_options=pa_csv.ReadOptions(autogenerate_column_names=True, block_size=_PARSE_CHUNK, use_threads=True),
            parse_options=pa_csv.ParseOptions(
                delimiter=delimiter, quote_char=False, double_quote=False, escape_char=False,
                newlines_in_values=False, ignore_empty_lines=False, invalid_row_handler=on_invalid,
            ),
            convert_options=pa_csv.ConvertOptions(
                include_columns=sorted(types), column_types=types, strings_can_be_null=False,
                null_values=[], quoted_strings_can_be_null=False, check_utf8=True,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowNotImplementedError, pa.ArrowTypeError, KeyError) as err:
        raise FastPathAnomaly(str(err)) from None
    batches = table.combine_chunks().to_batches()
    return (batches[0] if batches else _empty_batch(types)), blank + blank_rows[0]


def _empty_batch(types: dict[str, pa.DataType]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({name: pa.array([], t) for name, t in sorted(types.items())})


def _leading_blank_lines(block: bytes) -> tuple[int, int]:
    """(offset of the first non-blank line, number of blank lines before it)."""
    start = count = 0
    while start < len(block):
        end = block.find(b"\n", start, start + _BLANK_SCAN)
        end = len(block) if end < 0 else end + 1
        if block[start:end].strip():
            return start, count
        start, count = end, count + 1
    return start, count


def _checked_batch(batch: pa.RecordBatch, spec: ReadSpec) -> RawBatch:
    """A RawBatch of ``batch`` without its blank rows; anomalies raise."""
    columns = spec.columns
    ids = {name: batch.column(f"f{col}") for name, col in columns.ids()}
    weight = None if columns.weight is None else batch.column(f"f{columns.weight}")
    blank = 0
    empty = [pc.equal(pc.binary_length(a), 0) for a in ids.values()]
    if any(pc.any(e).as_py() for e in empty):
        all_empty = empty[0]
        any_empty = empty[0]
        for e in empty[1:]:
            all_empty, any_empty = pc.and_(all_empty, e), pc.or_(any_empty, e)
        if not pc.all(pc.equal(all_empty, any_empty)).as_py():
            raise FastPathAnomaly("an empty name in an id column")
        keep = pc.invert(all_empty)
        blank = len(batch) - pc.sum(keep).as_py()
        ids = {name: a.filter(keep) for name, a in ids.items()}
        weight = None if weight is None else weight.filter(keep)
    weights = None
    if weight is not None:
        if not pc.all(pc.is_finite(weight)).as_py():
            raise FastPathAnomaly("a weight that is not finite")
        weights = weight.to_numpy().astype(np.float32)
    if spec.relations is not None and not pc.all(pc.is_in(ids["rel"], pa.array(sorted(spec.relations)))).as_py():
        raise FastPathAnomaly("a relation name that is not in the config")
    return RawBatch(ids["lhs"], ids["rhs"], ids.get("rel"), weights, lines=len(batch), blank=blank)


# -- slow path ----------------------------------------------------------------------------


class _SlowBuffers:
    """Column lists of the slow path, turned into a RawBatch when full."""

    def __init__(self, with_rel: bool, with_weight: bool) -> None:
        self.with_rel, self.with_weight = with_rel, with_weight
        self.reset()

    def reset(self) -> None:
        self.lhs: list[str] = []
        self.rhs: list[str] = []
        self.rel: list[str] = []
        self.weight: list[float] = []
        self.lines = self.blank = 0
        self.bad: list[str] = []

    def take(self) -> RawBatch:
        batch = RawBatch(
            pa.array(self.lhs, pa.string()), pa.array(self.rhs, pa.string()),
            pa.array(self.rel, pa.string()) if self.with_rel else None,
            np.array(self.weight, dtype=np.float32) if self.with_weight else None,
            lines=self.lines, blank=self.blank, bad=self.bad,
        )
        self.reset()
        return batch


def slow_batches(path: str, url: str, spec: ReadSpec, delimiter: str) -> Iterator[RawBatch]:
    """Batches of a delimited text file read line by line; the authority on malformed lines.

    Raises:
        BadDataError: the first malformed line (unless ``spec.skip_bad_lines``), or no edge at all.
    """
    with open_binary(path, url) as lines:
        edges = yield from _slow_lines(lines, 1, url, spec, delimiter)
    if edges == 0:
        raise BadDataError(url, "line 1: expected an edge per line, the file has no edges")


def slow_block(block: bytes, first_line: int, url: str, spec: ReadSpec, delimiter: str) -> Iterator[RawBatch]:
    """Batches of one block of whole lines whose first line is line ``first_line`` of ``url``.

    Raises:
        BadDataError: the first malformed line (unless ``spec.skip_bad_lines``).
    """
    yield from _slow_lines(io.BytesIO(block), first_line, url, spec, delimiter)


def _slow_lines(lines: Iterable[bytes], first_line: int, url: str, spec: ReadSpec,
                delimiter: str) -> Generator[RawBatch, None, int]:
    """Batches of ``lines`` (numbered from ``first_line``); returns the number of edges."""
    columns = spec.columns
    sep = delimiter.encode("utf-8")
    buffers = _SlowBuffers(columns.rel is not None, columns.weight is not None)
    edges = 0
    # The column-count hint is for the file's first data line only.
    first_data_line = 0 if first_line == 1 else -1
    for number, raw in enumerate(lines, start=first_line):
        buffers.lines += 1
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            buffers.blank += 1
            continue
        first_data_line = first_data_line or number
        fields, problem = _parse_line(line.split(sep), columns, number == first_data_line, spec.relations)
        if problem is None and fields is None:
            buffers.blank += 1
            continue
        if problem is not None:
            shown = line.decode("utf-8", "replace")[:100]
            problem = f"line {number}: {problem}: {shown!r}"
            if not spec.skip_bad_lines:
                raise BadDataError(url, problem)
            buffers.bad.append(problem)
            continue
        lhs, rhs, rel, weight = fields  # type: ignore[misc]
        buffers.lhs.append(lhs)
        buffers.rhs.append(rhs)
        if rel is not None:
            buffers.rel.append(rel)
        if weight is not None:
            buffers.weight.append(weight)
        edges += 1
        if len(buffers.lhs) >= SLOW_BATCH_ROWS:
            yield buffers.take()
    yield buffers.take()
    return edges


def _parse_line(
    words: list[bytes], columns: Columns, first: bool, relations: frozenset[str] | None = None,
) -> tuple[tuple[str, str, str | None, float | None] | None, str | None]:
    """(fields, None) for an edge, (None, None) for a blank line, (None, problem) if malformed."""
    if len(words) < columns.needed:
        hint = " (is a column index or the delimiter wrong?)" if first else ""
        return None, (
            f"expected at least {columns.needed} columns ({columns.describe()}, 0-based) "
            f"but found {len(words)}{hint}"
        )
    values: dict[str, str] = {}
    for name, col in columns.ids():
        try:
            values[name] = words[col].decode("utf-8")  # type: ignore[index]
        except UnicodeDecodeError as err:
            return None, f"expected UTF-8 text in column {col} ({err.reason})"
    if not any(values.values()):
        return None, None
    empty = [col for name, col in columns.ids() if not values[name]]
    if empty:
        return None, f"empty name in column {empty[0]} (repeated delimiter?)"
    if relations is not None and values["rel"] not in relations:
        return None, f"relation {values['rel']!r} in column {columns.rel} is not in the config ({_expected(relations)})"
    weight = None
    if columns.weight is not None:
        word = words[columns.weight]  # type: ignore[index]
        try:
            weight = float(word)
        except ValueError:
            weight = math.nan
        if not math.isfinite(weight):
            return None, f"expected a finite number as weight, got {word.decode('utf-8', 'replace')!r}"
    return (values["lhs"], values["rhs"], values.get("rel"), weight), None


def _expected(relations: frozenset[str], shown: int = 10) -> str:
    names = sorted(relations)
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return "expected one of " + ", ".join(map(repr, names[:shown])) + more


# -- Parquet ------------------------------------------------------------------------------


def parquet_batches(path: str, url: str, spec: ReadSpec, rows_per_batch: int = 1 << 20) -> Iterator[RawBatch]:
    """Batches of a Parquet file (see the module docstring).

    Raises:
        BadDataError: a missing column, no rows, or a malformed row (unless ``skip_bad_lines``).
    """
    parquet = pq.ParquetFile(path)
    available = parquet.schema_arrow.names
    wanted = {name: _parquet_column(col, available, url) for name, col in zip(spec.columns._fields, spec.columns)
              if col is not None}
    if parquet.metadata.num_rows == 0:
        raise BadDataError(url, "row 1: expected an edge per row, the file has no rows")
    base = 0
    for batch in parquet.iter_batches(batch_size=rows_per_batch, columns=sorted(set(wanted.values()))):
        yield _parquet_batch(batch, wanted, base, url, spec)
        base += len(batch)


def _parquet_column(col: Column, available: list[str], url: str) -> str:
    if isinstance(col, int):
        if col >= len(available):
            raise BadDataError(url, f"column index {col} is out of range: the file has {len(available)} "
                               f"columns {available}")
        return available[col]
    if col not in available:
        raise BadDataError(url, f"column {col!r} not found; the file's columns are {available}")
    return col


def _parquet_batch(batch: pa.RecordBatch, wanted: dict[str, str], base: int, url: str, spec: ReadSpec) -> RawBatch:
    ids = {name: pc.cast(batch.column(col), pa.string()) for name, col in wanted.items() if name != "weight"}
    bad = np.zeros(len(batch), dtype=bool)
    for array in ids.values():
        bad |= pc.fill_null(pc.equal(pc.binary_length(array), 0), True).to_numpy(zero_copy_only=False)
    weight = None
    if "weight" in wanted:
        weight = pc.cast(batch.column(wanted["weight"]), pa.float64()).to_numpy(zero_copy_only=False)
        bad |= ~np.isfinite(weight)  # nulls arrive as NaN
    unknown = np.zeros(len(batch), dtype=bool)
    expected = ""
    if spec.relations is not None:
        known = pc.is_in(ids["rel"], pa.array(sorted(spec.relations)))
        unknown = ~pc.fill_null(known, True).to_numpy(zero_copy_only=False) & ~bad
        expected = _expected(spec.relations)
    problems: list[str] = []
    if bad.any() or unknown.any():
        rows = np.flatnonzero(bad | unknown)
        problems = [f"row {base + int(i) + 1}: " + (
            f"relation {ids['rel'][int(i)].as_py()!r} is not in the config ({expected})"
            if unknown[i] else "expected non-empty ids and a finite weight") for i in rows]
        if not spec.skip_bad_lines:
            raise BadDataError(url, problems[0] + f" in columns {wanted}")
        bad |= unknown
        keep = pa.array(~bad)
        ids = {name: a.filter(keep) for name, a in ids.items()}
        weight = None if weight is None else weight[~bad]
    return RawBatch(ids["lhs"], ids["rhs"], ids.get("rel"), None if weight is None else weight.astype(np.float32),
                    lines=len(batch), bad=problems)
