"""A checkpoint version's rows as evaluation looks them up: selected rows, or one partition into a reused buffer.

The one place a trained model's answers read rows (predict, score, similar and the similarity
index). Selected rows get the config's ``max_norm`` as every lookup without gradient does
(:func:`pbg_core.model.max_norm.renormed_rows` with ``settle=True``), so a row enters a score with
the bits ``pbg eval`` gives it. A whole partition is read as stored into one buffer reused for
every partition (predict's :func:`pbg_core.evaluation.ranking.rank_partition` renorms it itself),
or settled too (:meth:`TypeRows.partitions`, for similarity: a row comes out the same read alone or
with its partition). Each partition's stored shape (its HDF5 header) is checked once, before its
first read, against the names the rows belong to and the config's dimension: a checkpoint that
does not fit is one line naming its file, never a wrong entity's row or a tensor error deep in a
product. A version removed since the model was loaded (a training run committed a newer one
and removed the old, as it does) is named as such.

- :class:`CheckpointRows`: rows of any entity type, by (partition, offset) arrays;
- :class:`TypeRows`: one entity type's rows by :class:`~storage.trained.row_ids.RowIds`, its
  partitions in turn, and its global ids (:class:`~storage.trained.row_ids.GlobalIds`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from pbg_core.errors import ShapeError
from pbg_core.model.max_norm import renorm_table_, renormed_rows
from pbg_core.types import EntityName, FloatTensorType, LongTensorType, Partition
from storage import layout
from storage.checkpoint_reader import CheckpointReader
from storage.errors import DataNotFound
from storage.trained.row_ids import GlobalIds, RowIds


class CheckpointRows:
    """Rows of the version ``reader`` reads.

    Each (entity type, partition) file's stored shape is checked once, from its HDF5 header, before
    its first read: (its names' count, the config's dimension of the type). A file copied from
    another type, checkpoint or import is one line naming the file, both shapes and where the
    expected one comes from, whichever answer (predict, score, similar, the index, embeddings)
    reads it first.

    Args:
        reader: The version.
        max_norm: The config's ``max_norm`` (None: rows are used as stored).
        counts: An entity type's entities per partition: the names its rows belong to (the
            version's names record, or the entity files for rows without one). None: as the
            partition files hold them (only the dimension is checked).
    """

    def __init__(
        self,
        reader: CheckpointReader,
        max_norm: float | None,
        counts: Callable[[EntityName], Sequence[int]] | None = None,
    ) -> None:
        self.reader = reader
        self.max_norm = max_norm
        self._counts = counts
        self._shapes: dict[tuple[EntityName, Partition], tuple[int, int]] = {}  # stored, from the headers read
        self._checked: set[tuple[EntityName, Partition]] = set()

    def dimension(self, entity: EntityName) -> int:
        """The config's dimension of ``entity``."""
        return int(self.reader.config.entity_dimension(entity))

    def counts(self, entity: EntityName) -> list[int]:
        """``entity``'s rows per partition: its names' counts (as stored when no names were given)."""
        if self._counts is not None:
            return list(self._counts(entity))
        return self.stored_counts(entity)

    def lookup(self, entity: EntityName, parts: np.ndarray, offsets: np.ndarray) -> FloatTensorType:
        """The rows of ``entity`` at (``parts``, ``offsets``) ``[n, D]``, renormed (settled) with ``max_norm``.

        One read per partition present, of those rows only.

        Raises:
            ShapeError: a partition's stored shape is not (its names' count, the config's dimension).
            BadDataError: an offset outside its partition's rows.
            DataNotFound: a file is missing; the version was removed since it was loaded (said so).
        """
        dim = self.dimension(entity)
        out = torch.empty((len(parts), dim), dtype=torch.float32)
        for part in np.unique(parts).tolist():
            self.check(entity, part)
            where = np.flatnonzero(parts == part)
            with self._version_kept():
                rows = self.reader.load_rows(entity, part, offsets[where])
            out[torch.from_numpy(where)] = torch.from_numpy(rows)
        if self.max_norm is not None:
            out = renormed_rows(out, torch.arange(len(out)), self.max_norm, settle=True)
        return out

    def stored_counts(self, entity: EntityName) -> list[int]:
        """Rows per partition of ``entity`` as stored (the files' shapes; no rows read): for a caller without names."""
        return [self._stored(entity, part)[0] for part in range(self.reader.config.entities[entity].num_partitions)]

    def buffer(self, shapes: Iterable[tuple[EntityName, int]]) -> FloatTensorType:
        """One flat float32 buffer large enough for the largest of ``shapes`` ((entity type, rows) of partitions)."""
        size = max((rows * self.dimension(entity) for entity, rows in shapes), default=0)
        return torch.empty(size, dtype=torch.float32)

    def partition(self, entity: EntityName, part: Partition, buffer: FloatTensorType) -> FloatTensorType:
        """The stored rows of (``entity``, ``part``) ``[rows, D]``, read into the start of ``buffer`` (as stored).

        Args:
            entity: Entity type.
            part: Partition.
            buffer: From :meth:`buffer`; its first ``rows * D`` floats are overwritten (``rows``:
                the partition's count in :meth:`counts`).

        Raises:
            ShapeError: as :meth:`check`.
            DataNotFound: the file is missing; the version was removed since it was loaded (said so).
        """
        rows, dim = self.check(entity, part)
        with self._version_kept():
            return self.reader.load_partition(entity, part, out=buffer[: rows * dim].view(rows, dim))

    def check(self, entity: EntityName, part: Partition) -> tuple[int, int]:
        """The shape (rows, dim) of (``entity``, ``part``), once checked against its names and the config.

        Reads the file's HDF5 header once (:meth:`stored_counts` may have read it already).

        Raises:
            ShapeError: the stored shape is not (its names' count, the config's dimension): the
                file, both shapes and what the expected one comes from are named.
            DataNotFound: the file is missing; the version was removed since it was loaded (said so).
        """
        rows, dim = self.counts(entity)[part], self.dimension(entity)
        if (entity, part) in self._checked:
            return rows, dim
        stored = self._stored(entity, part)
        if stored != (rows, dim):
            names = f"the {rows} names of entity type {entity!r} partition {part}"
            if self._counts is not None:
                names += f" (listed in {self.reader.labels.entities[(entity, part)].url})"
            raise ShapeError(
                f"{self._url(entity, part)}: stored embeddings have shape {stored}, expected ({rows}, {dim}): "
                f"{names} and the config's dimension {dim} (a file of another entity type, import or checkpoint, "
                "or another config?)"
            )
        self._checked.add((entity, part))
        return rows, dim

    def _stored(self, entity: EntityName, part: Partition) -> tuple[int, int]:
        """The stored shape of (``entity``, ``part``): its file's header, read once.

        Raises:
            DataNotFound: the file is missing; the version was removed since it was loaded (said so).
        """
        if (entity, part) not in self._shapes:
            with self._version_kept():
                self._shapes[(entity, part)] = self.reader.checkpoints.embeddings_shape(
                    entity, part, self.reader.version
                )
        return self._shapes[(entity, part)]

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


class TypeRows:
    """The rows of ``entity`` in the version ``rows`` reads, :meth:`CheckpointRows.counts` of them per partition.

    Args:
        rows: The version's rows.
        entity: The entity type.
    """

    def __init__(self, rows: CheckpointRows, entity: EntityName) -> None:
        self.rows = rows
        self.reader = rows.reader
        self.entity = entity
        self.max_norm = rows.max_norm
        self.ids = GlobalIds(rows.counts(entity))
        self.sizes = self.ids.counts
        self.dim = rows.dimension(entity)

    @property
    def count(self) -> int:
        """Entities over all partitions."""
        return self.ids.count

    def global_ids(self, ids: RowIds) -> LongTensorType:
        """Each entity's position over all partitions (:meth:`GlobalIds.global_ids`)."""
        return self.ids.global_ids(ids)

    def row_ids(self, global_ids: LongTensorType) -> RowIds:
        """(partition, offset) of each global id (:meth:`GlobalIds.row_ids`)."""
        return self.ids.row_ids(global_ids)

    def load(self, ids: RowIds) -> FloatTensorType:
        """The rows ``[len(ids), dim]`` of the entities ``ids`` (any order, repeats allowed), settled.

        Raises:
            ValueError: a partition outside the type's.
            BadDataError, ShapeError, DataNotFound: as :meth:`CheckpointRows.lookup`.
        """
        bad = ids.partitions[(ids.partitions < 0) | (ids.partitions >= len(self.sizes))]
        if len(bad):
            raise ValueError(f"partition {int(bad[0])} of entity type {self.entity!r}: it has 0..{len(self.sizes) - 1}")
        return self.rows.lookup(self.entity, ids.partitions.numpy(), ids.offsets.numpy())

    def partitions(self) -> Iterator[tuple[int, FloatTensorType]]:
        """(partition, its rows settled) in partition order; the rows live in one buffer, valid until the next.

        Raises:
            ShapeError, DataNotFound: as :meth:`CheckpointRows.partition`.
        """
        buffer = self.rows.buffer((self.entity, size) for size in self.sizes)
        for part in range(len(self.sizes)):
            table = self.rows.partition(self.entity, part, buffer)
            if self.max_norm is not None:
                renorm_table_(table, self.max_norm, settle=True)
            yield part, table


__all__ = ["CheckpointRows", "TypeRows"]
