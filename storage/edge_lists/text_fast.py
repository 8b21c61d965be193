"""The fast path of a delimited text input: pyarrow over blocks of whole lines.

**Fast path** (:func:`fast_batches`): ``pyarrow.csv.read_csv`` on blocks of whole lines, parsed
one block ahead in a background thread, multi-threaded inside a block, no quoting. It never
judges a line: a block with anything unusual (a row with another column count, an empty name, a
conversion or UTF-8 error, a non-finite weight) is read again by the **slow path**
(:func:`~storage.edge_lists.text_slow.slow_block`, Python line by line, numbered from the block's first line), the authority
that names the line. So a few bad lines cost a few slow blocks, and a file whose lines have
varying column counts is valid but read slowly. The slow path reads whole files only where the
fast one cannot start (column names for a text file, no edge at all). When each edge's line
number is asked for (``ReadSpec.numbered``), a block without blank lines numbers its edges from
its first line, and a block with one is read by the slow path, which counts every line.
What a line means is in :mod:`storage.edge_lists.parse`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from storage.edge_lists.parse import Columns, FastPathAnomaly, RawBatch, ReadSpec, compression_of
from storage.edge_lists.prefetch import prefetched
from storage.edge_lists.text_slow import slow_block

logger = logging.getLogger(__name__)

_PARSE_CHUNK = 1 << 20  # bytes per pyarrow parse task inside a block (both cores share a block)
_BLANK_SCAN = 1 << 16  # bytes searched for leading blank lines of a block


def fast_batches(path: str, url: str, spec: ReadSpec, delimiter: str) -> Iterator[RawBatch]:
    """Batches of a delimited text file via pyarrow (see the module docstring).

    The file is cut into blocks of about ``spec.block_bytes`` at line ends; a background
    thread parses the next block (pyarrow, on both cores) while the caller maps this one, so
    at most three blocks are in memory whatever the file size. A block with anything unusual
    is read again line by line (:func:`~storage.edge_lists.text_slow.slow_block`), so a few bad lines in a large file cost
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
            if spec.numbered:
                _number(out, parsed)
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


def _number(batch: RawBatch, parsed: _Parsed) -> None:
    """Number ``batch``'s edges by line; a block with a blank line is left to the slow path, which counts them."""
    if batch.blank or parsed.blank:
        raise FastPathAnomaly("blank lines, and each edge's line number is asked for")
    batch.numbers = np.arange(parsed.first_line, parsed.first_line + len(batch), dtype=np.int64)


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
                delimiter=delimiter,
                quote_char=False,
                double_quote=False,
                escape_char=False,
                newlines_in_values=False,
                ignore_empty_lines=False,
                invalid_row_handler=on_invalid,
            ),
            convert_options=pa_csv.ConvertOptions(
                include_columns=sorted(types),
                column_types=types,
                strings_can_be_null=False,
                null_values=[],
                quoted_strings_can_be_null=False,
                check_utf8=True,
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
    return RawBatch(ids.get("lhs"), ids.get("rhs"), ids.get("rel"), weights, lines=len(batch), blank=blank)
