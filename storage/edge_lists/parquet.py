"""Reading a Parquet edge-list input as column batches.

**Parquet** (:func:`parquet_batches`): columns by name (or 0-based index); ids of any type are
read as strings; a null or empty id or a non-finite weight is malformed (reported as ``row N``,
1-based, which is also each edge's number when ``ReadSpec.numbered`` asks for them).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.edge_columns import Column
from storage.edge_lists.parse import RawBatch, ReadSpec, expected_relations, no_rows
from storage.errors import BadDataError


def parquet_batches(path: str, url: str, spec: ReadSpec, rows_per_batch: int = 1 << 20) -> Iterator[RawBatch]:
    """Batches of a Parquet file (see the module docstring).

    Raises:
        BadDataError: a missing column, no rows, or a malformed row (unless ``skip_bad_lines``).
    """
    parquet = pq.ParquetFile(path)
    available = parquet.schema_arrow.names
    wanted = {
        name: _parquet_column(col, spec.labels.get(name), available, url)
        for name, col in zip(spec.columns._fields, spec.columns, strict=True)
        if col is not None
    }
    if parquet.metadata.num_rows == 0:
        raise BadDataError(url, no_rows(spec, parquet=True))
    base = 0
    for batch in parquet.iter_batches(batch_size=rows_per_batch, columns=sorted(set(wanted.values()))):
        yield _parquet_batch(batch, wanted, base, url, spec)
        base += len(batch)


def _parquet_column(col: Column, label: str | None, available: list[str], url: str) -> str:
    """The name of column ``col`` (given as ``label``, e.g. ``-l ``, if a command's option gave it)."""
    given = f" ({label}{col})" if label else ""
    if isinstance(col, int):
        if col >= len(available):
            raise BadDataError(
                url, f"column index {col}{given} is out of range: the file has {len(available)} columns {available}"
            )
        return available[col]
    if col not in available:
        raise BadDataError(url, f"column {col!r}{given} not found; the file's columns are {available}")
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
        expected = expected_relations(spec.relations)
    problems: list[str] = []
    if bad.any() or unknown.any():
        rows = np.flatnonzero(bad | unknown)
        problems = [
            f"row {base + int(i) + 1}: "
            + (
                f"relation {ids['rel'][int(i)].as_py()!r} is not in the config ({expected})"
                if unknown[i]
                else "expected non-empty ids and a finite weight"
            )
            for i in rows
        ]
        if not spec.skip_bad_lines:
            raise BadDataError(url, problems[0] + f" in columns {wanted}")
        bad |= unknown
        keep = pa.array(~bad)
        ids = {name: a.filter(keep) for name, a in ids.items()}
        weight = None if weight is None else weight[~bad]
    numbers = None
    if spec.numbered:
        numbers = np.arange(base + 1, base + len(batch) + 1, dtype=np.int64)[~bad]
    return RawBatch(
        ids.get("lhs"),
        ids.get("rhs"),
        ids.get("rel"),
        None if weight is None else weight.astype(np.float32),
        lines=len(batch),
        bad=problems,
        numbers=numbers,
    )
