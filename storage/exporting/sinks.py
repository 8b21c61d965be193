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
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Protocol

import h5py
import numpy as np

from pbg_core.registry import Registry
from storage.exporting.text import write_blocks

EMBEDDINGS_DATASET = "embeddings"
NAMES_DATASET = "names"


class EmbeddingSink(Protocol):
    """Receives one entity type's partitions in order."""

    def write(self, names: Sequence[str], embeddings: np.ndarray) -> None:
        """Append ``embeddings`` (float32 ``[len(names), dim]``) and their names."""

    def close(self) -> None:
        """Close the files (also after a failure; the exporter then discards them)."""


@dataclass(frozen=True)
class ExportFormat:
    """A registered format: the suffixes of its files and how to open a sink on them."""

    suffixes: tuple[str, ...]
    open: Callable[[list[str], int, int], EmbeddingSink]  # (local paths, count, dim) -> sink


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


EXPORT_FORMATS.register("tsv")(ExportFormat((".tsv",), lambda paths, count, dim: TsvSink(paths[0], count)))
EXPORT_FORMATS.register("npy")(
    ExportFormat((".npy", ".names.json"), lambda paths, count, dim: NpySink(paths[0], paths[1], count, dim))
)
EXPORT_FORMATS.register("h5")(ExportFormat((".h5",), lambda paths, count, dim: H5Sink(paths[0], count, dim)))
