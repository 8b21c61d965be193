"""The stored rows of one entity type of a checkpoint version, looked up as a trained model's answers look them up.

An entity is known by (partition, offset) (:class:`RowIds`), or by its position over all the
type's partitions in partition order (its *global id*: the row a similarity index gives it).
:class:`TypeRows` reads rows as evaluation looks them up: as trained, without the global
embedding (the model's :meth:`~pbg_core.model.embedder.MultiRelationEmbedder.adjust` adds it),
with ``max_norm`` settled (:func:`pbg_core.model.max_norm.renorm_table_` with ``settle=True``:
a row comes out the same whether it is read alone or with its whole partition).

Memory: :meth:`TypeRows.partitions` reads one partition at a time into one buffer of the largest
partition's size, reused; :meth:`TypeRows.load` reads only the rows asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from pbg_core.model.max_norm import renorm_table_
from pbg_core.types import EntityName, FloatTensorType, LongTensorType
from storage.checkpoint_reader import CheckpointReader


@dataclass(frozen=True)
class RowIds:
    """Entities of one type by (partition, offset); the two tensors have one shape.

    Attributes:
        partitions: int64, each entity's partition (-1: none, in a result's empty slot).
        offsets: int64, its offset in that partition (-1: none).
    """

    partitions: LongTensorType
    offsets: LongTensorType

    def __len__(self) -> int:
        """Number of entities (of the first dimension)."""
        return int(self.partitions.shape[0])


class TypeRows:
    """The rows of ``entity`` in the version ``reader`` reads (their shapes are read at once, no rows).

    Args:
        reader: The checkpoint version.
        entity: The entity type.
        max_norm: The config's ``max_norm``, or None.
    """

    def __init__(self, reader: CheckpointReader, entity: EntityName, max_norm: float | None) -> None:
        self.reader = reader
        self.entity = entity
        self.max_norm = max_norm
        parts = range(reader.config.entities[entity].num_partitions)
        shapes = [reader.checkpoints.embeddings_shape(entity, part, reader.version) for part in parts]
        self.sizes = [rows for rows, _ in shapes]
        self.dim = shapes[0][1] if shapes else reader.config.entity_dimension(entity)
        self.starts = torch.tensor([0, *np.cumsum(self.sizes)[:-1].tolist()], dtype=torch.int64)

    @property
    def count(self) -> int:
        """Entities over all partitions."""
        return sum(self.sizes)

    def global_ids(self, ids: RowIds) -> LongTensorType:
        """Each entity's position over all partitions (-1 where ``ids`` has none)."""
        valid = ids.partitions >= 0
        found = self.starts[ids.partitions.clamp_min(0)] + ids.offsets
        return torch.where(valid, found, torch.full_like(found, -1))

    def row_ids(self, global_ids: LongTensorType) -> RowIds:
        """(partition, offset) of each global id (-1 for a negative id, faiss's empty slot)."""
        valid = global_ids >= 0
        parts = torch.searchsorted(self.starts, global_ids.clamp_min(0), right=True) - 1
        offsets = global_ids - self.starts[parts]
        none = torch.full_like(global_ids, -1)
        return RowIds(torch.where(valid, parts, none), torch.where(valid, offsets, none))

    def load(self, ids: RowIds) -> FloatTensorType:
        """The rows ``[len(ids), dim]`` of the entities ``ids`` (any order, repeats allowed), settled.

        Raises:
            ValueError: a partition outside the type's.
            BadDataError: an offset outside its partition (:meth:`CheckpointReader.load_rows`).
        """
        out = torch.empty(len(ids), self.dim)
        for part in ids.partitions.unique().tolist():
            if not 0 <= part < len(self.sizes):
                raise ValueError(f"partition {part} of entity type {self.entity!r}: it has 0..{len(self.sizes) - 1}")
            mine = (ids.partitions == part).nonzero().squeeze(1)
            rows = self.reader.load_rows(self.entity, part, ids.offsets[mine].numpy())
            out[mine] = torch.from_numpy(rows)
        if self.max_norm is not None:
            renorm_table_(out, self.max_norm, settle=True)
        return out

    def partitions(self) -> Iterator[tuple[int, FloatTensorType]]:
        """(partition, its rows settled) in partition order; the rows live in one buffer, valid until the next."""
        buffer = torch.empty(max(self.sizes, default=0), self.dim)
        for part, size in enumerate(self.sizes):
            table = self.reader.load_partition(self.entity, part, out=buffer[:size])
            if self.max_norm is not None:
                renorm_table_(table, self.max_norm, settle=True)
            yield part, table
