"""Spill files: the ids of every edge of one input, written in pass 1 and read back in pass 2.

Pass 1 parses text once and stores each edge as fixed-width numbers in a local temporary
directory, so pass 2 never re-parses: ``lhs`` and ``rhs`` (int32 per-entity-type ids, -1 when
the edge's relation is unknown), ``rel`` (int32: the config relation index, -1 if unknown, or the
dynamic relation id) and ``weight`` (float32, only when weighted). 12 to 16 bytes per edge.
Memory: one chunk at a time on either side.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

_FIELDS = {"lhs": np.int32, "rhs": np.int32, "rel": np.int32, "weight": np.float32}
MAX_ID = np.iinfo(np.int32).max


@dataclass
class SpillChunk:
    """Consecutive edges of one input, as numpy columns."""

    lhs: np.ndarray
    rhs: np.ndarray
    rel: np.ndarray
    weight: np.ndarray | None

    def __len__(self) -> int:
        return len(self.rel)


class Spill:
    """The spill files of one input under ``directory`` (created).

    Args:
        directory: A fresh local directory.
        weighted: Whether a weight file is kept.
    """

    def __init__(self, directory: str, weighted: bool) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.fields = [f for f in _FIELDS if weighted or f != "weight"]
        self.num_edges = 0
        self._files: dict[str, BinaryIO] | None = None

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, f"{name}.bin")

    def append(self, chunk: SpillChunk) -> None:
        """Write ``chunk`` at the end (the files are opened on first use)."""
        if self._files is None:
            self._files = {name: open(self._path(name), "wb") for name in self.fields}  # noqa: SIM115 - the spill files stay open across calls; close() closes them
        for name in self.fields:
            getattr(chunk, name).astype(_FIELDS[name], copy=False).tofile(self._files[name])
        self.num_edges += len(chunk)

    def reset(self) -> None:
        """Drop everything written (a file re-read on the slow path starts over)."""
        self.close()
        for name in self.fields:
            if os.path.exists(self._path(name)):
                os.remove(self._path(name))
        self.num_edges = 0

    def close(self) -> None:
        """Flush and close the files (reading needs them closed)."""
        if self._files is not None:
            for handle in self._files.values():
                handle.close()
            self._files = None

    def chunks(self, chunk_edges: int) -> Iterator[SpillChunk]:
        """The edges in order, ``chunk_edges`` at a time."""
        self.close()
        if self.num_edges == 0:
            return
        handles = {name: open(self._path(name), "rb") for name in self.fields}  # noqa: SIM115 - the spill files stay open across calls; close() closes them
        try:
            for _ in range(0, self.num_edges, chunk_edges):
                cols = {
                    name: np.fromfile(handles[name], dtype=_FIELDS[name], count=chunk_edges) for name in self.fields
                }
                yield SpillChunk(cols["lhs"], cols["rhs"], cols["rel"], cols.get("weight"))
        finally:
            for handle in handles.values():
                handle.close()
