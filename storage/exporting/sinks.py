"""Export formats: where one entity type's embeddings go, partition by partition.

Each format is registered in :data:`EXPORT_FORMATS` under its CLI name with the file
suffixes it writes next to each other (``<out>/<entity><suffix>``) and a factory that
opens a sink on *local* paths (the exporter publishes them atomically afterwards):

- ``tsv``: ``<entity>.tsv``, PBG's entities layout ``name\\tv1\\t...\\tvD`` with ``%.9f``.
- ``npy``: ``<entity>.npy`` (float32, ``[count, dim]``, C order; the ``.npy`` header is
  written first and every partition appended raw, so memory holds one partition) and
  ``<entity>.names.json`` (JSON list of the names in row order, streamed the same way).
- ``h5``: ``<entity>.h5`` with datasets ``embeddings`` (float32 ``[count, dim]``) and
  ``names`` (UTF-8 variable-length strings), filled partition by partition.

A sink receives partitions in row order, never more than the ``count`` rows announced
when it was opened (the exporter announces the sum of the stored partition shapes).

Each format also estimates the bytes of its files from an :class:`EntityShape` (rows,
dimension, bytes of the names), so the exporter can check the disk has room before writing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Protocol

import h5py
import numpy as np

from pbg_core.registry import Registry
from storage import layout
from storage.exporting.text import estimated_text_bytes, write_blocks

EMBEDDINGS_DATASET = "embeddings"
NAMES_DATASET = "names"
FLOAT32_BYTES = 4
NPY_HEADER_BYTES = 128  # write_array_header_1_0 pads the header to a multiple of 64: 128 for any 2-D float32 shape
# HDF5, measured (h5py 3, 300 to 50,000 names of 4 to 40 bytes): each variable-length name costs
# 16 bytes in the dataset, a 16-byte global heap header and padding to 8 bytes; plus the file's metadata.
H5_BYTES_PER_NAME = 36
H5_FILE_BYTES = 8192


@dataclass(frozen=True)
class EntityShape:
    """What one entity type's export holds: rows, dimension, and the UTF-8 bytes of its names (estimated)."""

    count: int
    dim: int
    name_bytes: int


class EmbeddingSink(Protocol):
    """Receives one entity type's partitions in order."""

    def write(self, names: Sequence[str], embeddings: np.ndarray) -> None:
        """Append ``embeddings`` (float32 ``[len(names), dim]``) and their names."""

    def close(self) -> None:
        """Close the files (also after a failure; the exporter then discards them)."""


@dataclass(frozen=True)
class ExportFormat:
    """A registered format: the suffixes of its files, how to open a sink on them and their estimated sizes."""

    suffixes: tuple[str, ...]
    open: Callable[[list[str], int, int], EmbeddingSink]  # (local paths, count, dim) -> sink
    sizes: Callable[[EntityShape], tuple[int, ...]]  # bytes of each file, in suffix order


EXPORT_FORMATS: Registry[ExportFormat] = Registry("export format")


class _RowCounter:
    """Counts rows and refuses more than the announced total."""

    def __init__(self, path: str, count: int) -> None:
        self.path, self.count, self.written = path, count, 0

    def add(self, rows: int) -> int:
        """Reserve ``rows`` more rows; returns the offset of the first one."""
        if self.written + rows > self.count:
            raise ValueError(f"{self.path}: got {self.written + rows} rows, announced {self.count}")
        start, self.written = self.written, self.written + rows
        return start


class TsvSink:
    """``name\\tv1...\\tvD`` lines (PBG's entities file) in one binary file."""

    def __init__(self, path: str, count: int) -> None:
        self._rows = _RowCounter(path, count)
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115  # closed by close()

    def write(self, names: Sequence[str], embeddings: np.ndarray) -> None:
        self._rows.add(len(names))
        write_blocks(self._file, names, embeddings)

    def close(self) -> None:
        self._file.close()


class NpySink:
    """A ``.npy`` array appended row block by row block, plus its names as a JSON list."""

    def __init__(self, array_path: str, names_path: str, count: int, dim: int) -> None:
        self._rows = _RowCounter(array_path, count)
        self._array: BinaryIO = open(array_path, "wb")  # noqa: SIM115  # closed by close()
        header = {"descr": np.dtype("<f4").str, "fortran_order": False, "shape": (count, dim)}
        np.lib.format.write_array_header_1_0(self._array, header)
        self._names: BinaryIO = open(names_path, "wb")  # noqa: SIM115  # closed by close()
        self._names.write(b"[")

    def write(self, names: Sequence[str], embeddings: np.ndarray) -> None:
        first = self._rows.add(len(names)) == 0
        self._array.write(np.ascontiguousarray(embeddings, dtype="<f4").tobytes())
        if names:
            # json.dumps of the partition's list without its brackets: one C-level encode per partition.
            self._names.write((("" if first else ", ") + json.dumps(list(names))[1:-1]).encode("utf-8"))

    def close(self) -> None:
        self._names.write(b"]")
        self._names.close()
        self._array.close()


class H5Sink:
    """An HDF5 file with ``embeddings`` and ``names`` datasets, filled partition by partition."""

    def __init__(self, path: str, count: int, dim: int) -> None:
        self._rows = _RowCounter(path, count)
        self._file = h5py.File(path, "w")
        self._embeddings = self._file.create_dataset(EMBEDDINGS_DATASET, shape=(count, dim), dtype="<f4")
        self._names = self._file.create_dataset(NAMES_DATASET, shape=(count,), dtype=h5py.string_dtype("utf-8"))

    def write(self, names: Sequence[str], embeddings: np.ndarray) -> None:
        start = self._rows.add(len(names))
        if names:  # h5py cannot write an empty selection
            self._embeddings[start : start + len(names)] = embeddings
            self._names[start : start + len(names)] = np.array(names, dtype=object)

    def close(self) -> None:
        self._file.close()


def tsv_sizes(shape: EntityShape) -> tuple[int]:
    """``<entity>.tsv``: one line per entity, see :func:`storage.exporting.text.estimated_text_bytes`."""
    return (estimated_text_bytes(shape.count, shape.dim, shape.name_bytes),)


def npy_sizes(shape: EntityShape) -> tuple[int, int]:
    """``<entity>.npy`` exactly; ``<entity>.names.json``: the names in brackets, quoted, ``, `` between them."""
    return NPY_HEADER_BYTES + shape.count * shape.dim * FLOAT32_BYTES, max(2, shape.name_bytes + 4 * shape.count)


def h5_sizes(shape: EntityShape) -> tuple[int]:
    """``<entity>.h5``: the float32 matrix, the names (see :data:`H5_BYTES_PER_NAME`) and the file's metadata."""
    matrix = shape.count * shape.dim * FLOAT32_BYTES
    return (matrix + shape.name_bytes + H5_BYTES_PER_NAME * shape.count + H5_FILE_BYTES,)


EXPORT_FORMATS.register("tsv")(ExportFormat((".tsv",), lambda paths, count, dim: TsvSink(paths[0], count), tsv_sizes))
EXPORT_FORMATS.register("npy")(
    ExportFormat(
        (".npy", layout.NPY_NAMES_SUFFIX), lambda paths, count, dim: NpySink(paths[0], paths[1], count, dim), npy_sizes
    )
)
EXPORT_FORMATS.register("h5")(ExportFormat((".h5",), lambda paths, count, dim: H5Sink(paths[0], count, dim), h5_sizes))
