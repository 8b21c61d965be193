"""``init_new_rows.h5`` in a checkpoint directory: prepared starts of rows ``init_path`` lacks.

With ``init_new_entities: neighbor_mean`` the run computes, before training, the neighbor mean of
every new entity that has trained neighbors (:mod:`pbg_core.session.neighbor_means`) and writes them
here; while nothing is committed, a partition read from ``init_path`` takes its new rows from
this file (:class:`pbg_core.ports.NewRowSource`). One file for every partition (only the new rows
with a neighbor are in it, so it is small), written atomically, read once per process.

Layout: root attributes ``format_version = 1``, ``keys`` (JSON list of [entity type, partition])
and ``source`` (JSON: the ``init_path`` URL and version the means were taken from); datasets
``offsets_{i}`` (int64), ``vectors_{i}`` (float32, rows x dimension) and ``sums_{i}`` (float32,
the rows' initial Adagrad sums) for ``keys[i]``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from storage import hdf5, layout
from storage.errors import BadDataError, DataNotFound
from storage.fs import changes, urls
from storage.fs.urls import StorageOptions

Key = tuple[str, int]
Rows = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]  # offsets, vectors, Adagrad sums


class NewRowsFile:
    """The prepared new rows of one checkpoint directory."""

    def __init__(self, checkpoint_url: str, storage_options: StorageOptions = None) -> None:
        self.url = urls.join_url(checkpoint_url, layout.NEW_ROWS_FILE)
        self._storage_options = storage_options
        self._lock = threading.Lock()  # partitions may be filled on the I/O thread and the training thread
        self._loaded: dict[Key, Rows] | None = None

    def __repr__(self) -> str:
        return f"NewRowsFile({self.url!r})"

    def save(self, rows: Mapping[Key, Rows], source: Mapping[str, Any]) -> None:
        """Write ``rows`` (key -> (offsets, vectors, Adagrad sums)) and where they were computed from, atomically."""
        keys = sorted(rows)
        with hdf5.open_write(self.url, self._storage_options) as hf:
            hf.attrs["keys"] = json.dumps([list(key) for key in keys])
            hf.attrs["source"] = json.dumps(dict(source), sort_keys=True)
            for i, key in enumerate(keys):
                offsets, vectors, sums = rows[key]
                hf.create_dataset(f"offsets_{i}", data=offsets.numpy().astype(np.int64))
                hf.create_dataset(f"vectors_{i}", data=vectors.numpy().astype(np.float32))
                if sums is not None:
                    hf.create_dataset(f"sums_{i}", data=sums.numpy().astype(np.float32))
        with self._lock:
            self._loaded = None

    def source(self) -> dict[str, Any] | None:
        """Where the saved rows were computed from, or None if there is no file."""
        try:
            with hdf5.open_read(self.url, self._storage_options) as hf:
                return dict(json.loads(str(hf.attrs.get("source", "{}"))))
        except DataNotFound:
            return None

    def remove(self) -> None:
        """Delete the file (idempotent)."""
        changes.remove(self.url, missing_ok=True, storage_options=self._storage_options)
        with self._lock:
            self._loaded = None

    def load_new_rows(self, entity: str, part: int) -> Rows | None:
        """(offsets, vectors, Adagrad sums or None) of (entity, part), or None (no file, or none for it)."""
        with self._lock:
            if self._loaded is None:
                self._loaded = self._read()
            return self._loaded.get((entity, part))

    def _read(self) -> dict[Key, Rows]:
        try:
            with hdf5.open_read(self.url, self._storage_options) as hf:
                keys = json.loads(str(hf.attrs["keys"]))
                return {
                    (str(entity), int(part)): (
                        torch.from_numpy(hdf5.require_dataset(hf, f"offsets_{i}", self.url)[()]),
                        torch.from_numpy(hdf5.require_dataset(hf, f"vectors_{i}", self.url)[()]),
                        torch.from_numpy(hf[f"sums_{i}"][()]) if f"sums_{i}" in hf else None,
                    )
                    for i, (entity, part) in enumerate(keys)
                }
        except DataNotFound:
            return {}
        except (KeyError, ValueError, TypeError) as err:
            raise BadDataError(self.url, f"not a new-rows file of pbg-flow ({err})") from None


__all__ = ["NewRowsFile"]
