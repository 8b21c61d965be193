"""Fast ``%.9f`` text for embedding exports: ``key\\tv1\\t...\\tvD\\n`` lines, byte-identical to PBG.

PBG's ``export_to_tsv`` formats every float32 element with Python's ``"%.9f" % x`` (the
value widened to double, correctly rounded, ties to even). Doing that per value costs
about 1 µs; here a whole row block is formatted with numpy instead:

- ``|x| * 1e9`` is *exact* in float64 for any float32 ``x`` (24-bit mantissa times
  ``1e9 = 2**9 * 1953125``, a 21-bit odd factor: 45 bits < 53), so ``rint`` of it (ties to
  even, the FPU default) is exactly the 9-decimal fixed-point value ``%.9f`` prints.
- Its integer and fraction parts become ASCII digits with integer arithmetic, written into
  a ``uint8`` matrix of fixed-width fields where unused positions hold NUL; dropping the
  NUL bytes yields the text. The fraction's digits are stored two at a time through a
  ``uint16`` view (the field width is even so the halfwords are aligned).
- Names are a NUL-padded ``S`` array copied into the first columns of the same matrix.

Blocks the fast path cannot represent fall back to Python's formatting (same text, just
slower): values that are not float32, not finite, or ``>= 2**33`` in magnitude (their
fixed-point value overflows int64), names containing NUL, or very long names (the
matrix would be mostly padding).

:func:`write_blocks` formats block ``i + 1`` in a worker thread while block ``i`` is
written; numpy releases the GIL in its loops, so both cores work.
"""

from __future__ import annotations

import concurrent.futures
from collections import deque
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np

ROW_BLOCK = 4096  # rows formatted at once: ~5 MB of text for D = 100
FORMAT_THREADS = 2  # this machine has two cores; the writer thread mostly waits on I/O
MAX_FAST_NAME_BYTES = 512  # longer names: the NUL-padded name columns would dominate the block
_FAST_LIMIT = 2.0**33  # |x| * 1e9 must fit in int64

_TAB, _NEWLINE, _MINUS = 9, 10, 45
# Bytes of one value's text, tab included, for |x| < 10 (nearly every embedding): "\t-1.234567890".
VALUE_TEXT_BYTES = 13


def estimated_text_bytes(rows: int, dim: int, key_bytes: int) -> int:
    """About the bytes of :func:`write_blocks`' text: ``rows`` lines of ``dim`` values after keys of ``key_bytes``.

    Each value counts :data:`VALUE_TEXT_BYTES`: exact for a negative value within (-10, 10), one
    byte over for a positive one; a value of 10 or more in magnitude takes a byte more per digit
    (that text can outgrow the estimate: the exporter then names the full disk while writing).
    """
    return key_bytes + rows * (1 + dim * VALUE_TEXT_BYTES)


def format_rows_slow(keys: Sequence[str], values: np.ndarray) -> bytes:
    """PBG's formatting done the obvious way: one ``%`` per row (reference and fallback)."""
    if values.shape[0] != len(keys):
        raise ValueError(f"got {len(keys)} keys for {values.shape[0]} rows of values")
    row_format = "\t".join(["%.9f"] * values.shape[1])
    rows = values.tolist()
    return "".join(f"{key}\t{row_format % tuple(row)}\n" for key, row in zip(keys, rows, strict=True)).encode("utf-8")


def format_rows(keys: Sequence[str], values: np.ndarray) -> bytes:
    """UTF-8 lines ``key\\tv1\\t...\\tvD\\n``, values as ``"%.9f" % float(v)``, one per row.

    Args:
        keys: One prefix per row (already tab-joined if it has several fields).
        values: ``[len(keys), D]`` array, D >= 1; float32 takes the fast path.

    Returns:
        The text, byte-identical to :func:`format_rows_slow`.

    Raises:
        ValueError: ``keys`` and ``values`` disagree on the number of rows.
    """
    if values.ndim != 2 or values.shape[0] != len(keys):
        raise ValueError(f"got {len(keys)} keys for values of shape {tuple(values.shape)}, expected ({len(keys)}, D)")
    if len(keys) == 0:
        return b""
    names = _names_array(keys)
    if names is None or values.shape[1] == 0 or not _fast_values(values):
        return format_rows_slow(keys, values)
    return _format_fast(names, np.ascontiguousarray(values))


def _fast_values(values: np.ndarray) -> bool:
    # NaN fails the comparison too: max() propagates it.
    return values.dtype == np.float32 and bool(np.abs(values).max() < _FAST_LIMIT)


def _names_array(keys: Sequence[str]) -> np.ndarray | None:
    """The keys as a NUL-padded ``S`` array of their UTF-8 bytes, or None if the fast path cannot use them."""
    joined = "".join(keys)
    if "\0" in joined:
        return None
    if joined.isascii():
        names = np.array(keys, dtype="S")
    else:
        names = np.array([key.encode("utf-8") for key in keys], dtype="S")
    if names.dtype.itemsize > MAX_FAST_NAME_BYTES:
        return None
    return names


def _fixed_point(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sign bit, integer part int64, 9-digit fraction uint32) of ``round_half_even(|x| * 1e9)``."""
    negative = np.signbit(values)
    scaled = np.abs(values, dtype=np.float64)
    scaled *= 1e9  # exact, see the module docstring
    np.rint(scaled, out=scaled)
    fixed = scaled.astype(np.int64)
    integer = fixed // 1_000_000_000
    fraction = (fixed - integer * 1_000_000_000).astype(np.uint32)
    return negative, integer, fraction


def _digit_pairs(pair: np.ndarray) -> np.ndarray:
    """``uint16`` whose little-endian bytes are the two ASCII digits of ``pair`` (0..99)."""
    tens = pair // np.uint32(10)
    ones = pair - tens * np.uint32(10)
    digits: np.ndarray = (tens + ones * np.uint32(256) + np.uint32(0x3030)).astype("<u2")
    return digits


def _format_fast(names: np.ndarray, values: np.ndarray) -> bytes:
    rows, dim = values.shape
    negative, integer, fraction = _fixed_point(values)
    int_digits = len(str(int(integer.max())))
    # Field: tab, sign, [pad], integer digits, '.', 9 digits; even width keeps the halfwords aligned.
    width = int_digits + 12 + int_digits % 2
    name_bytes = names.dtype.itemsize
    head = name_bytes + name_bytes % 2
    body_end = head + dim * width
    matrix = np.zeros((rows, body_end + 2), dtype=np.uint8)  # + newline + pad: even row length
    matrix[:, :name_bytes] = names.view(np.uint8).reshape(rows, name_bytes)
    fields = matrix[:, head:body_end].reshape(rows, dim, width)
    fields[:, :, 0] = _TAB
    fields[:, :, 1] = negative * np.uint8(_MINUS)
    _write_integer_digits(fields[:, :, width - 10 - int_digits : width - 10], integer, int_digits)
    halves = matrix.view("<u2")[:, head // 2 : body_end // 2].reshape(rows, dim, width // 2)
    _write_fraction(halves[:, :, width // 2 - 5 :], fraction)
    matrix[:, body_end] = _NEWLINE
    return bytes(matrix[matrix != 0].tobytes())


def _write_integer_digits(out: np.ndarray, integer: np.ndarray, digits: int) -> None:
    """ASCII digits of ``integer`` right-aligned in ``out[..., :digits]``, leading zeros left NUL."""
    if digits == 1:
        out[..., 0] = integer.astype(np.uint8) + np.uint8(48)
        return
    for j in range(digits):
        power = 10 ** (digits - 1 - j)
        digit = (integer // power % 10 + 48).astype(np.uint8)
        if j < digits - 1:
            digit *= integer >= power  # a leading zero becomes NUL (dropped); the units digit stays
        out[..., j] = digit


def _write_fraction(out: np.ndarray, fraction: np.ndarray) -> None:
    """``.d1`` then four digit pairs into the five ``uint16`` columns of ``out``."""
    first = fraction // np.uint32(100_000_000)
    out[..., 0] = (first * np.uint32(256) + np.uint32(0x302E)).astype("<u2")  # '.', then the digit
    rest = fraction - first * np.uint32(100_000_000)
    high = rest // np.uint32(10_000)
    low = rest - high * np.uint32(10_000)
    for column, group in ((1, high), (3, low)):
        pair = group // np.uint32(100)
        out[..., column] = _digit_pairs(pair)
        out[..., column + 1] = _digit_pairs(group - pair * np.uint32(100))


def iter_blocks(
    keys: Sequence[str], values: np.ndarray, block: int = ROW_BLOCK
) -> Iterator[tuple[Sequence[str], np.ndarray]]:
    """(keys, values) slices of ``block`` rows."""
    for start in range(0, len(keys), block):
        yield keys[start : start + block], values[start : start + block]


def write_blocks(out: BinaryIO, keys: Sequence[str], values: np.ndarray, block: int = ROW_BLOCK) -> int:
    """Write :func:`format_rows` of ``keys``/``values`` to ``out``, formatting ahead in threads.

    At most ``FORMAT_THREADS + 1`` formatted blocks wait in memory, and they are written in order.

    Returns:
        The number of lines written.
    """
    if values.shape[0] != len(keys):
        raise ValueError(f"got {len(keys)} keys for {values.shape[0]} rows of values")
    if len(keys) <= block:
        out.write(format_rows(keys, values))
        return len(keys)
    pending: deque[concurrent.futures.Future[bytes]] = deque()
    with concurrent.futures.ThreadPoolExecutor(FORMAT_THREADS, thread_name_prefix="export-format") as pool:
        for block_keys, block_values in iter_blocks(keys, values, block):
            pending.append(pool.submit(format_rows, block_keys, block_values))
            if len(pending) > FORMAT_THREADS:
                out.write(pending.popleft().result())
        while pending:
            out.write(pending.popleft().result())
    return len(keys)
