"""A checkpoint version's rows as evaluation looks them up: selected rows, or one partition into a reused buffer.

Both apply the config's ``max_norm`` as every lookup without gradient does
(:func:`pbg_core.model.max_norm.renormed_rows` with ``settle=True``; a whole partition is renormed
by :func:`pbg_core.evaluation.ranking.rank_partition` itself), so a row enters a score with the
bits ``pbg eval`` gives it. Shapes are checked against the names the rows belong to and the
config's dimension: a checkpoint that does not fit is one line naming its file, never a tensor
error deep in a product. A version removed since the model was loaded (a training run committed
a newer one and removed the old, as it does) is named as such.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import numpy as np
import torch

from pbg_core.errors import ShapeError
from pbg_core.model.max_norm import renormed_rows
from pbg_core.types import EntityName, FloatTensorType, Partition
from storage import layout
from storage.checkpoint_reader import CheckpointReader
from storage.errors import DataNotFound


class CheckpointRows:
    """Rows of the version ``reader`` reads.

    Args:
        reader: The version.
        max_norm: The config's ``max_norm`` (None: rows are used as stored).
    """

    def __init__(self, reader: CheckpointReader, max_norm: float | None) -> None:
        self.reader = reader
        self.max_norm = max_norm

    def dimension(self, entity: EntityName) -> int:
        """The config's dimension of ``entity``."""
        return int(self.reader.config.entity_dimension(entity))

    def lookup(self, entity: EntityName, parts: np.ndarray, offsets: np.ndarray) -> FloatTensorType:
        """The rows of ``entity`` at (``parts``, ``offsets``) ``[n, D]``, renormed (settled) with ``max_norm``.

        One read per partition present, of those rows only.

        Raises:
            ShapeError: the stored rows' dimension is not the config's (the file named).
            BadDataError: an offset outside its partition's rows.
            DataNotFound: a file is missing; the version was removed since it was loaded (said so).
        """
        dim = self.dimension(entity)
        out = torch.empty((len(parts), dim), dtype=torch.float32)
        for part in np.unique(parts).tolist():
            where = np.flatnonzero(parts == part)
            with self._version_kept():
                rows = self.reader.load_rows(entity, part, offsets[where])
            if rows.shape[1] != dim:
                raise ShapeError(
                    f"{self._url(entity, part)}: embeddings of entity type {entity!r} have dimension "
                    f"{rows.shape[1]}, the config's is {dim}; load the model with the config it was trained with"
                )
            out[torch.from_numpy(where)] = torch.from_numpy(rows)
        if self.max_norm is not None:
            out = renormed_rows(out, torch.arange(len(out)), self.max_norm, settle=True)
        return out

    def buffer(self, shapes: Iterable[tuple[EntityName, int]]) -> FloatTensorType:
        """One flat float32 buffer large enough for the largest of ``shapes`` ((entity type, rows) of partitions)."""
        size = max((rows * self.dimension(entity) for entity, rows in shapes), default=0)
        return torch.empty(size, dtype=torch.float32)

    def partition(self, entity: EntityName, part: Partition, rows: int, buffer: FloatTensorType) -> FloatTensorType:
        """The stored rows of (``entity``, ``part``) ``[rows, D]``, read into the start of ``buffer`` (as stored).

        Args:
            entity: Entity type.
            part: Partition.
            rows: How many names its rows belong to.
            buffer: From :meth:`buffer`; its first ``rows * D`` floats are overwritten.

        Raises:
            ShapeError: the stored shape is not (``rows``, the config's dimension): the file, both
                shapes and what they come from are named.
            DataNotFound: the file is missing; the version was removed since it was loaded (said so).
        """
        dim = self.dimension(entity)
        table = buffer[: rows * dim].view(rows, dim)
        try:
            with self._version_kept():
                return self.reader.load_partition(entity, part, out=table)
        except ShapeError:
            stored = self.reader.checkpoints.embeddings_shape(entity, part, self.reader.version)
            raise ShapeError(
                f"{self._url(entity, part)}: stored embeddings have shape {stored}, expected ({rows}, {dim}): "
                f"{rows} names of entity type {entity!r} partition {part} and the config's dimension {dim}"
            ) from None

    @contextlib.contextmanager
    def _version_kept(self) -> Iterator[None]:
        """Name a version a training run removed since it was loaded (a committed one is immutable, but
        ``remove-old-version`` deletes it once a newer one is committed), rather than a missing file.

        Raises:
            DataNotFound: naming the version, the one committed now, and what to do.
        """
        try:
            yield
        except DataNotFound:
            checkpoints, version = self.reader.checkpoints, self.reader.version
            if version in checkpoints.list_versions():
                raise
            raise DataNotFound(
                checkpoints.url,
                f"version {version} was removed after this model was loaded (committed now: "
                f"{checkpoints.read_version()}); load the model again",
            ) from None

    def _url(self, entity: EntityName, part: Partition) -> str:
        """The file of (``entity``, ``part``) in the version read."""
        return self.reader.checkpoints.file_url(layout.embeddings_file(entity, part, self.reader.version))


__all__ = ["CheckpointRows"]
