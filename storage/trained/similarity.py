"""The entities nearest to given ones by the model's own metric: exact, or through a similarity index.

"Nearest" is the comparator's score between two entities of one type, as the model defines it
(:func:`pbg_core.evaluation.ranking.similarity_scores`: rows looked up with ``max_norm`` settled,
the global embedding added, the comparator's ``prepare`` and its score, a bias included: ``dot``,
``cos``, ``-l2``, ``-squared_l2``); higher is nearer. An entity is never its own neighbour.

- **Exact** (:func:`exact_neighbours`): every partition of the type is read in turn into one
  reused buffer and scored in blocks of at most ``ALL_NEGS_SCORE_BUDGET`` scores
  (:data:`COLUMN_BLOCK` entities at a time, so the comparator adjusts no more than that many rows
  at once), the best ``k`` kept by :meth:`~pbg_core.evaluation.ranking.RankState.merge`: by score
  descending, then (partition, offset) ascending, ties at the k-th score included in that order.
- **Approximate** (:func:`approximate_neighbours`): a faiss index
  (:mod:`storage.trained.similarity_index`) finds the candidates; each is rescored with the
  model's ``pos_scores`` and the list ordered as the exact one is. Scores are the model's, and may
  differ from the exact search's in the last bits (a matrix product rounds otherwise than a
  row-wise one). A type of at most ``FLAT_MAX_ROWS`` entities has no index: asked for an
  approximate answer, it gets the exact one.

:class:`SimilarEntities` holds one checkpoint version's :class:`~storage.trained.checkpoint_rows.TypeRows`
and indexes per entity type, each opened (loaded, else built) at most once in its lifetime.
Memory: the query rows, the top lists, one partition (and one block of scores), plus the index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from pbg_core.errors import UsageError
from pbg_core.evaluation.ranking import RankState, query_block_rows, similarity_scores
from pbg_core.model.embedder import MultiRelationEmbedder
from pbg_core.types import EntityName, FloatTensorType, LongTensorType
from storage.checkpoint_reader import CheckpointReader
from storage.trained.checkpoint_rows import CheckpointRows, TypeRows
from storage.trained.index_provenance import faiss_metric
from storage.trained.row_ids import RowIds
from storage.trained.similarity_index import FLAT_MAX_ROWS, SimilarityIndex, open_index, query_vectors
from storage.trained.small_work import threads_for

# Entities of a partition scored at once: the comparator adjusts (copies) at most this many rows at
# a time, and the blocks do not depend on how many queries there are.
COLUMN_BLOCK = 4096


@dataclass(frozen=True)
class Neighbours:
    """The nearest entities of each query, best first.

    Attributes:
        scores: float32 ``[Q, k]``; ``-inf`` in a slot without a neighbour.
        partitions: int64 ``[Q, k]``, each neighbour's partition (-1: none).
        offsets: int64 ``[Q, k]``, its offset in that partition (-1: none).
    """

    scores: FloatTensorType
    partitions: LongTensorType
    offsets: LongTensorType


def exact_neighbours(
    model: MultiRelationEmbedder, rows: TypeRows, queries: RowIds, k: int, block_columns: int = COLUMN_BLOCK
) -> Neighbours:
    """The ``k`` nearest entities of each of ``queries`` among every entity of ``rows``' type, exactly.

    Args:
        model: The model.
        rows: The entity type's rows in the version read.
        queries: Entities of that type.
        k: Neighbours per query (>= 1); slots beyond the type's other entities stay empty.
        block_columns: Entities scored at once (:data:`COLUMN_BLOCK`; tests lower it).
    """
    query = rows.load(queries)
    state = RankState.empty(len(queries), k)
    step = query_block_rows(block_columns)
    for part, table in rows.partitions():
        for first in range(0, table.shape[0], block_columns):
            block = table[first : first + block_columns]
            for start in range(0, len(queries), step):
                batch = slice(start, start + step)
                scores = similarity_scores(model, rows.entity, query[batch], block, None)  # rows are settled
                _drop_self(scores, queries, batch, part, first)
                state.merge(batch, scores, part, first)
    return Neighbours(state.scores, state.partitions, state.offsets)


def _drop_self(scores: FloatTensorType, queries: RowIds, batch: slice, part: int, first: int) -> None:
    """Score ``-inf`` each query's own column, if it lies in this block of partition ``part``."""
    offsets = queries.offsets[batch] - first
    own = ((queries.partitions[batch] == part) & (offsets >= 0) & (offsets < scores.shape[1])).nonzero().squeeze(1)
    scores[own, offsets[own]] = float("-inf")


@torch.no_grad()
def approximate_neighbours(
    model: MultiRelationEmbedder, rows: TypeRows, index: SimilarityIndex, queries: RowIds, k: int
) -> Neighbours:
    """The ``k`` nearest entities of each of ``queries`` as ``index`` finds them, rescored by the model.

    Args:
        model: The model.
        rows: The entity type's rows in the version read (the index's).
        index: Its similarity index.
        queries: Entities of that type.
        k: Neighbours per query (>= 1).
    """
    query = rows.load(queries)
    vectors = query_vectors(model, rows.entity, query, bool(index.provenance.bias))
    hits = index.neighbours(vectors, rows.global_ids(queries), k)
    found = rows.row_ids(hits)
    real = (hits >= 0).nonzero()  # (query, slot) of every hit
    hit_rows = rows.load(RowIds(found.partitions[real[:, 0], real[:, 1]], found.offsets[real[:, 0], real[:, 1]]))
    adjusted = model.adjust(query, rows.entity)[real[:, 0]]
    scores = torch.full(hits.shape, float("-inf"))
    scores[real[:, 0], real[:, 1]] = model.comparator.pos_scores(adjusted, model.adjust(hit_rows, rows.entity))
    # As the exact lists: score descending, then (partition, offset) ascending; empty slots last.
    order = torch.argsort(found.offsets, dim=1, stable=True)
    order = order.gather(1, torch.argsort(found.partitions.gather(1, order), dim=1, stable=True))
    order = order.gather(1, torch.argsort(scores.gather(1, order), dim=1, descending=True, stable=True))
    return Neighbours(scores.gather(1, order), found.partitions.gather(1, order), found.offsets.gather(1, order))


class SimilarEntities:
    """Nearest entities in one checkpoint version; each type's rows and index opened once, on first use.

    Args:
        model: The model of that version.
        reader: The version.
        flat_max_rows: Largest type searched exactly when an approximate answer is asked for, without
            an index (``FLAT_MAX_ROWS``; tests lower it).
        counts: An entity type's entities per partition (the names its rows belong to, against
            which each partition's stored shape is checked); None: as the partition files hold them.
    """

    def __init__(
        self,
        model: MultiRelationEmbedder,
        reader: CheckpointReader,
        flat_max_rows: int = FLAT_MAX_ROWS,
        counts: Callable[[EntityName], Sequence[int]] | None = None,
    ) -> None:
        self.model = model
        self.reader = reader
        self.flat_max_rows = flat_max_rows
        self._lookup = CheckpointRows(reader, reader.config.max_norm, counts)
        self._rows: dict[EntityName, TypeRows] = {}
        self._indexes: dict[EntityName, SimilarityIndex | None] = {}

    def rows(self, entity: EntityName) -> TypeRows:
        """``entity``'s rows in this version."""
        if entity not in self._rows:
            self._rows[entity] = TypeRows(self._lookup, entity)
        return self._rows[entity]

    def index(self, entity: EntityName) -> SimilarityIndex | None:
        """``entity``'s similarity index: the stored one if it matches, else built (and stored if possible);
        None for a type of at most ``flat_max_rows`` entities, which exact search serves.

        Raises:
            UsageError: the comparator has no faiss metric (refused whatever the type's size).
        """
        faiss_metric(self.reader.config.comparator, bool(self.reader.config.bias))
        if entity not in self._indexes:
            rows = self.rows(entity)
            if rows.count <= self.flat_max_rows:
                self._indexes[entity] = None
                return None

            def exact(ids: RowIds, k: int) -> LongTensorType:
                found = exact_neighbours(self.model, rows, ids, k)
                return rows.global_ids(RowIds(found.partitions, found.offsets))

            self._indexes[entity] = open_index(self.model, rows, exact)
        return self._indexes[entity]

    def check(self, entity: EntityName, k: int, approximate: bool = False) -> None:
        """Refuse a search of ``k`` neighbours in ``entity`` before any row is read.

        Raises:
            UsageError: ``k`` outside 1..count-1 (an entity is not its own neighbour), or
                ``approximate`` with a comparator without a faiss metric.
        """
        count = self.rows(entity).count
        if not 1 <= k <= count - 1:
            allowed = f"give 1..{count - 1:,}" if count > 1 else "it has no other entity to compare with"
            raise UsageError(
                f"k={k}: entity type {entity!r} has {count:,} entities, so at most {count - 1:,} neighbours of one "
                f"(an entity is not its own); {allowed}"
            )
        if approximate:
            faiss_metric(self.reader.config.comparator, bool(self.reader.config.bias))

    def nearest(self, entity: EntityName, queries: RowIds, k: int, approximate: bool = False) -> Neighbours:
        """The ``k`` nearest entities of each of ``queries`` (entities of type ``entity``).

        Args:
            entity: The entity type.
            queries: Entities of that type.
            k: Neighbours per query, 1 up to the type's entities less one.
            approximate: Through the similarity index (opened on first use) rather than exactly; the
                answer is exact for a type of at most ``flat_max_rows`` entities.

        Raises:
            UsageError: as :meth:`check`.
        """
        self.check(entity, k, approximate)
        rows = self.rows(entity)
        index = self.index(entity) if approximate else None
        if index is not None:
            return approximate_neighbours(self.model, rows, index, queries, k)
        with threads_for(len(queries) * rows.count * rows.dim):
            return exact_neighbours(self.model, rows, queries, k)
