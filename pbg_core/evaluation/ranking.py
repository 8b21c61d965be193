"""Ranking every entity of a type for many queries, one partition at a time, as evaluation ranks.

A trained model's answers (predict, similar) rank with evaluation's own code: the scores come
from :meth:`~pbg_core.model.embedder.MultiRelationEmbedder.ranking_query`,
:meth:`~pbg_core.model.embedder.MultiRelationEmbedder.ranking_candidates` and
:meth:`~pbg_core.model.embedder.MultiRelationEmbedder.candidate_scores` (``all_negs``
evaluation's path, bit for bit whatever the block of rows), rows are looked up with ``max_norm``
settled (:mod:`pbg_core.model.max_norm`), known edges are masked by
:func:`~pbg_core.evaluation.metrics.mask_known`, and a true answer's rank follows
:func:`~pbg_core.evaluation.metrics.ranks_from_scores` (``1 + #(score >= answer's)``, the answer's
score from evaluation's positive path, :func:`answer_scores`).

- :class:`QuerySet`: queries ``(anchor, relation, ?)`` ranking one side.
- :class:`RankState`: per query, the running top-k, ordered by score descending, then
  (partition, offset) ascending, ties included (``torch.topk`` alone breaks them arbitrarily);
  and the candidates that beat the true answer.
- :func:`rank_partition`: fold the candidates of one partition into the state.
- :func:`similarity_scores`: the comparator's own metric between entities of one type.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pbg_core.evaluation.metrics import FilterIndex, mask_known, ranks_from_scores
from pbg_core.kernels.fused import accepts
from pbg_core.kernels.top_k import row_top_k
from pbg_core.model.embedder import MASKED, MultiRelationEmbedder, SideBatch
from pbg_core.model.max_norm import renorm_table_
from pbg_core.model.negatives import NegativeMode, chunk_layout
from pbg_core.model.row_blocks import ROW_BLOCK, padded_rows
from pbg_core.types import EntityName, FloatTensorType, LongTensorType, Side

# Ranking every entity scores [rows, count]; rows per block are capped so one block holds at
# most this many scores (64 MiB of float32). Evaluation's all_negs batches obey it too.
ALL_NEGS_SCORE_BUDGET = 1 << 24


@dataclass(frozen=True)
class Answers:
    """The true entity of each query, whose rank is counted.

    Attributes:
        partition: ``[Q]`` its partition.
        offset: ``[Q]`` its offset within that partition.
        score: ``[Q]`` the edge's score from :func:`answer_scores` (evaluation's positive).
    """

    partition: LongTensorType
    offset: LongTensorType
    score: FloatTensorType


@dataclass(frozen=True)
class QuerySet:
    """Queries ``(anchor, relation, ?)`` ranking the entities of ``side``.

    Attributes:
        side: The side ranked (RHS: the tails of ``(head, rel, ?)``; LHS: the heads of ``(?, rel, tail)``).
        rel: The relation (standard mode), or each query's relation ``[Q]`` (dynamic mode).
        anchors: ``[Q, D]`` the anchors' rows (the other side's entities), looked up as
            evaluation does: :func:`~pbg_core.model.max_norm.renormed_rows` with ``settle=True``.
        anchor_offsets: ``[Q]`` the anchors' offsets in their partition, to find known edges; or None.
        answers: The true entity of each query, or None (no rank counted).
    """

    side: Side
    rel: int | LongTensorType
    anchors: FloatTensorType
    anchor_offsets: LongTensorType | None = None
    answers: Answers | None = None

    def __len__(self) -> int:
        """Number of queries."""
        return int(self.anchors.shape[0])

    def rels(self) -> LongTensorType:
        """Each query's relation id ``[Q]``."""
        if isinstance(self.rel, torch.Tensor):
            return self.rel
        return torch.full((len(self),), int(self.rel), dtype=torch.int64)


@dataclass
class RankState:
    """What ranking has found so far, per query (updated by :func:`rank_partition`).

    Attributes:
        k: Length of the top lists.
        scores: ``[Q, k]`` the best scores, descending; ``-inf`` marks a slot without a candidate
            (fewer than k candidates seen, or the rest were known edges).
        partitions: ``[Q, k]`` each candidate's partition (-1 in empty slots).
        offsets: ``[Q, k]`` each candidate's offset in its partition (-1 in empty slots).
        beaten: ``[Q]`` candidates of every partition seen scoring at least the answer's score,
            known edges and the answer itself excepted: ``answer_rank - 1``.
        answer_partition_rank: ``[Q]`` ``1 +`` those of the answer's own partition, the rank
            ``pbg eval`` gives the edge; 0 until that partition is seen.
    """

    k: int
    scores: FloatTensorType
    partitions: LongTensorType
    offsets: LongTensorType
    beaten: LongTensorType
    answer_partition_rank: LongTensorType

    @classmethod
    def empty(cls, num_queries: int, k: int) -> RankState:
        """A state before any partition, for ``num_queries`` queries and top lists of ``k`` (>= 1).

        Raises:
            ValueError: ``k`` is below 1.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        none = torch.full((num_queries, k), -1, dtype=torch.int64)
        return cls(
            k=k,
            scores=torch.full((num_queries, k), float("-inf")),
            partitions=none,
            offsets=none.clone(),
            beaten=torch.zeros(num_queries, dtype=torch.int64),
            answer_partition_rank=torch.zeros(num_queries, dtype=torch.int64),
        )

    @property
    def answer_rank(self) -> LongTensorType:
        """``[Q]`` the answer's rank among every entity of every partition seen."""
        return self.beaten + 1

    def merge(self, rows: slice, scores: FloatTensorType, part: int, first: int = 0) -> None:
        """Fold the scores ``[B, N]`` of queries ``rows`` against partition ``part`` into the top lists.

        ``first``: the offset in the partition of the entity of column 0 (a block of its columns).
        """
        vals, cols = _top_with_ties(scores, min(self.k, scores.shape[1]))
        cols = cols + first
        all_scores = torch.cat([self.scores[rows], vals], dim=1)
        all_parts = torch.cat([self.partitions[rows], torch.full_like(cols, part)], dim=1)
        all_offsets = torch.cat([self.offsets[rows], cols], dim=1)
        # (score desc, partition asc, offset asc) by three stable sorts, least significant first.
        order = torch.argsort(all_offsets, dim=1, stable=True)
        order = order.gather(1, torch.argsort(all_parts.gather(1, order), dim=1, stable=True))
        order = order.gather(1, torch.argsort(all_scores.gather(1, order), dim=1, descending=True, stable=True))
        order = order[:, : self.k]
        top = all_scores.gather(1, order)
        empty = top == float("-inf")
        self.scores[rows] = top
        self.partitions[rows] = all_parts.gather(1, order).masked_fill_(empty, -1)
        self.offsets[rows] = all_offsets.gather(1, order).masked_fill_(empty, -1)


def _top_with_ties(scores: FloatTensorType, k: int) -> tuple[FloatTensorType, LongTensorType]:
    """Each row's ``k`` best scores and their columns; among scores tied at the k-th, the lowest columns.

    Contiguous float32 scores go through the one-pass kernel :func:`pbg_core.kernels.top_k.row_top_k`
    (ties by column already). Otherwise ``torch.topk``, which picks tied entries arbitrarily: rows
    where more entries equal the k-th value than were picked are redone: every entry above it (NaN
    counts as above, as for ``topk``), then the tied ones in column order. Ties at ``-inf`` (no
    candidate) are left as they are.
    """
    if k > 0 and accepts((scores,)):
        return row_top_k(scores, k, threads=min(2, torch.get_num_threads()))
    vals, cols = torch.topk(scores, k, dim=1)
    if k == 0 or k == scores.shape[1]:
        return vals, cols
    kth = vals[:, -1:]
    tied = (scores == kth).sum(dim=1) > (vals == kth).sum(dim=1)
    redo = (tied & torch.isfinite(kth[:, 0])).nonzero().squeeze(1)
    if redo.numel():
        sub, sub_kth = scores[redo], kth[redo]
        above = (sub > sub_kth) | sub.isnan()
        equal = sub == sub_kth
        room = k - above.sum(dim=1, keepdim=True)
        take = above | (equal & (equal.cumsum(dim=1) <= room))
        picked = take.nonzero()[:, 1].view(-1, k)  # row-major: k columns per row, ascending
        cols[redo] = picked
        vals[redo] = sub.gather(1, picked)
    return vals, cols


@torch.no_grad()
def answer_scores(
    model: MultiRelationEmbedder,
    side: Side,
    rel: int | LongTensorType,
    anchors: FloatTensorType,
    answer_rows: FloatTensorType,
) -> FloatTensorType:
    """The score evaluation gives each edge (anchor, rel, answer) when it ranks ``side``: ``[Q]``.

    Evaluation's positive path exactly: :meth:`~MultiRelationEmbedder.score` with neither side
    sampling negatives; in dynamic mode the forward score ranks the LHS, the reverse the RHS.

    Args:
        model: The model.
        side: The side ranked (the answers' side).
        rel: The relation (standard mode), or each edge's ``[Q]`` (dynamic mode).
        anchors: ``[Q, D]`` the other side's rows, as :class:`QuerySet` wants them.
        answer_rows: ``[Q, D]`` the answers' rows, looked up alike.
    """
    spec = model.relation(0 if model.dynamic else int(rel))
    lhs_rows, rhs_rows = (answer_rows, anchors) if side is Side.LHS else (anchors, answer_rows)
    if model.dynamic and not isinstance(rel, torch.Tensor):
        rel = torch.full((anchors.shape[0],), int(rel), dtype=torch.int64)
    layout = chunk_layout(NegativeMode.NONE, anchors.shape[0], 0, 0)
    lhs = SideBatch(spec.lhs, lhs_rows, NegativeMode.NONE)
    rhs = SideBatch(spec.rhs, rhs_rows, NegativeMode.NONE)
    scores = model.score(rel, layout, lhs, rhs)
    return side.pick(scores.lhs_pos, scores.rhs_pos)


def query_block_rows(candidates: int) -> int:
    """Queries scored at once against ``candidates`` entities: as many as ``ALL_NEGS_SCORE_BUDGET``
    scores allow, rounded down to a multiple of ``ROW_BLOCK`` (at least one block).

    A product's rows are padded to ``ROW_BLOCK`` anyway (:mod:`pbg_core.model.row_blocks`): a block
    of 134 queries against a 125k-entity partition computed 144 rows, 7% more than 128 do.
    """
    rows = ALL_NEGS_SCORE_BUDGET // max(candidates, 1)
    return max(ROW_BLOCK, rows - rows % ROW_BLOCK)


@torch.no_grad()
def rank_partition(
    model: MultiRelationEmbedder,
    queries: QuerySet,
    part: int,
    table: FloatTensorType,
    max_norm: float | None,
    known: FilterIndex | None,
    state: RankState,
) -> None:
    """Fold every entity of one partition of the ranked type into ``state``.

    Queries are scored in blocks of at most ``ALL_NEGS_SCORE_BUDGET`` scores. Known edges score
    ``-inf`` in the top lists (filtered) and ``MASKED`` in the counts, as in filtered evaluation;
    the answer's own column is masked in the counts only, as evaluation masks the positive.

    Args:
        model: The model.
        queries: The queries.
        part: The partition's index (recorded in the top lists, compared with the answers').
        table: ``[N, D]`` the partition's embeddings, renormed in place (settled) with
            ``max_norm``, as evaluation's lookup of every entity.
        max_norm: The config's ``max_norm``, or None.
        known: The known true edges whose ranked side lies in this partition (the filter
            paths' bucket of anchor partition and ``part``), or None (unfiltered).
        state: Updated in place.

    Raises:
        ValueError: ``known`` is given but the queries have no ``anchor_offsets``.
    """
    offsets = queries.anchor_offsets
    if known is not None and offsets is None:
        raise ValueError("filtering known edges needs QuerySet.anchor_offsets")
    if max_norm is not None:
        renorm_table_(table, max_norm, settle=True)
    cands = model.ranking_candidates(queries.side, queries.rel, table)
    query = model.ranking_query(queries.side, queries.rel, queries.anchors)
    rels = queries.rels()
    step = query_block_rows(table.shape[0])
    # One buffer for every block: a fresh block of scores is mapped anew each time (glibc maps
    # allocations this large) and its pages fault in again, which cost half the product.
    buffer = torch.empty((min(step, padded_rows(len(queries))), table.shape[0]))
    for start in range(0, len(queries), step):
        rows = slice(start, start + step)
        scores = model.candidate_scores(query[rows], cands, out=buffer)
        masked = None
        if known is not None and offsets is not None:
            masked = mask_known(scores, known, queries.side, offsets[rows], rels[rows], float("-inf"))
        state.merge(rows, scores, part)
        if queries.answers is not None:
            _count_beaten(scores, queries.answers, rows, part, masked, state)


def _count_beaten(
    scores: FloatTensorType,
    answers: Answers,
    rows: slice,
    part: int,
    masked: tuple[LongTensorType, LongTensorType] | None,
    state: RankState,
) -> None:
    """Add the candidates of ``scores`` that beat each answer; the answer's partition rank."""
    if masked is not None:
        scores[masked] = MASKED
    mine = (answers.partition[rows] == part).nonzero().squeeze(1)
    scores[mine, answers.offset[rows][mine]] = MASKED
    beaten = ranks_from_scores(answers.score[rows], scores) - 1
    state.beaten[rows] += beaten
    state.answer_partition_rank[rows.start + mine] = beaten[mine] + 1


@torch.no_grad()
def similarity_scores(
    model: MultiRelationEmbedder,
    entity: EntityName,
    rows: FloatTensorType,
    table: FloatTensorType,
    max_norm: float | None,
) -> FloatTensorType:
    """Scores ``[Q, N]`` of entities ``rows`` against every entity of ``table``, by the comparator's own metric.

    Both sides are adjusted without an operator (the global embedding, then the comparator's
    ``prepare``: ``cos`` normalises) and compared by :meth:`~MultiRelationEmbedder.candidate_scores`.

    Args:
        model: The model.
        entity: Their entity type.
        rows: ``[Q, D]`` the query entities' rows, looked up as :class:`QuerySet` wants them.
        table: ``[N, D]`` one partition's embeddings, renormed in place (settled) with ``max_norm``.
        max_norm: The config's ``max_norm``, or None.
    """
    if max_norm is not None:
        renorm_table_(table, max_norm, settle=True)
    return model.candidate_scores(model.adjust(rows, entity), model.adjust(table, entity))
