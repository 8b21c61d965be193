"""Predict's loop: rank every entity of a type for many queries, one partition in memory at a time.

1. **Anchors**: each group's anchor rows (and its true answers' rows, if given) are read alone
   (:meth:`~storage.trained.checkpoint_rows.CheckpointRows.lookup`, ``max_norm`` settled), and
   the answers scored by evaluation's positive path
   (:func:`pbg_core.evaluation.ranking.answer_scores`).
2. **Partitions**: for each ranked entity type, each of its partitions is read into one buffer
   reused for all of them, and every group ranking that type folds it into its state
   (:func:`pbg_core.evaluation.ranking.rank_partition`: the operator and comparator exactly as
   ``pbg eval`` applies them, the running top-k, and the candidates beating each answer).
3. **Known edges** (filtered): a group is split by its anchors' partition, so that each part
   is filtered with its own bucket, as evaluation filters an edge with its bucket's edges
   (:mod:`storage.trained.known_edges`).

Memory: the model, the anchors ``[Q, D]``, one partition (plus an operator-transformed copy for
a standard-mode right-hand side), one score block of at most
:data:`~pbg_core.evaluation.ranking.ALL_NEGS_SCORE_BUDGET` floats, the top-k ``[Q, k]``, and
with filtering the current partition's buckets of the filter paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pbg_core.evaluation.ranking import Answers, QuerySet, RankState, answer_scores, rank_partition
from pbg_core.model.embedder import MultiRelationEmbedder
from pbg_core.types import EntityName, FloatTensorType, LongTensorType, Partition, Side
from storage.trained.checkpoint_rows import CheckpointRows
from storage.trained.known_edges import KnownEdges
from storage.trained.small_work import threads_for


@dataclass(frozen=True)
class Located:
    """Entities of one type by (partition, offset), one per query (int64 arrays)."""

    entity: EntityName
    part: np.ndarray
    offset: np.ndarray


@dataclass(frozen=True)
class TargetGroup:
    """Queries that rank the same entity type with the same relation (standard mode) or the template (dynamic).

    Attributes:
        side: The side ranked (RHS: tails of ``(head, rel, ?)``; LHS: heads of ``(?, rel, tail)``).
        rel: The relation (standard mode), or each query's relation ``[Q]`` (dynamic mode).
        anchors: The other side's entity of each query.
        target: The entity type ranked.
        counts: Its entities per partition (the names its rows belong to).
        answers: Each query's true entity (of ``target``), whose rank is counted; or None.
    """

    side: Side
    rel: int | np.ndarray
    anchors: Located
    target: EntityName
    counts: tuple[int, ...]
    answers: Located | None = None


@dataclass(frozen=True)
class Ranked:
    """What ranking found for each query of a group.

    Attributes:
        scores: ``[Q, k]`` the top scores, descending; ``-inf`` in slots without a candidate
            (every other candidate was a known edge).
        partitions: ``[Q, k]`` their partitions (-1 in empty slots).
        offsets: ``[Q, k]`` their offsets (-1 in empty slots).
        answer_score: ``[Q]`` each answer's score (evaluation's positive), or None without answers.
        answer_rank: ``[Q]`` its rank among every entity of the type (known edges excepted), or None.
        answer_partition_rank: ``[Q]`` its rank within its own partition: ``pbg eval``'s, or None.
    """

    scores: FloatTensorType
    partitions: LongTensorType
    offsets: LongTensorType
    answer_score: FloatTensorType | None = None
    answer_rank: LongTensorType | None = None
    answer_partition_rank: LongTensorType | None = None


@dataclass(frozen=True)
class _Part:
    """The queries of a group whose anchors share one partition (all of them when unfiltered)."""

    rows: np.ndarray  # their positions in the group
    anchor_part: Partition  # -1 when unfiltered
    queries: QuerySet
    state: RankState


@torch.no_grad()
def rank_targets(
    rows: CheckpointRows,
    model: MultiRelationEmbedder,
    groups: Sequence[TargetGroup],
    k: int,
    known: KnownEdges | None = None,
) -> list[Ranked]:
    """Rank every entity of each group's target type for each query; one result per group.

    Args:
        rows: The checkpoint version's rows.
        model: The model, its parameters loaded from that version.
        groups: The queries.
        k: Length of the top lists (>= 1).
        known: Known edges to filter out (``--filtered``), or None.

    Raises:
        ShapeError: a partition's stored shape is not its names' count by the config's dimension.
        DataNotFound: a checkpoint file, or a bucket file of a filter path, is missing.
    """
    work = sum(len(group.anchors.part) * sum(group.counts) * rows.dimension(group.target) for group in groups)
    with threads_for(work):
        return _ranked(rows, model, groups, k, known)


def _ranked(
    rows: CheckpointRows,
    model: MultiRelationEmbedder,
    groups: Sequence[TargetGroup],
    k: int,
    known: KnownEdges | None,
) -> list[Ranked]:
    """:func:`rank_targets`'s work, on the threads chosen there."""
    parts = [_split(rows, model, group, k, known is not None) for group in groups]
    buffer = rows.buffer((group.target, count) for group in groups for count in group.counts)
    for target in dict.fromkeys(group.target for group in groups):
        mine = [(group, split) for group, split in zip(groups, parts, strict=True) if group.target == target]
        for part in range(len(mine[0][0].counts)):
            table = rows.partition(target, part, buffer)
            for group, split in mine:
                for piece in split:
                    index = known.index(group.side, piece.anchor_part, part) if known is not None else None
                    rank_partition(model, piece.queries, part, table, rows.max_norm, index, piece.state)
            if known is not None:
                known.release()
    return [
        _joined(split, len(group.anchors.part), k, group.answers is not None)
        for group, split in zip(groups, parts, strict=True)
    ]


def _split(
    rows: CheckpointRows, model: MultiRelationEmbedder, group: TargetGroup, k: int, filtered: bool
) -> list[_Part]:
    """The group's queries, with their anchors' rows and answers' scores; by anchor partition if ``filtered``."""
    anchors = rows.lookup(group.anchors.entity, group.anchors.part, group.anchors.offset)
    rel: int | LongTensorType = group.rel if isinstance(group.rel, int) else torch.from_numpy(group.rel)
    answers = None
    if group.answers is not None:
        answer_rows = rows.lookup(group.target, group.answers.part, group.answers.offset)
        score = answer_scores(model, group.side, rel, anchors, answer_rows)
        answers = Answers(torch.from_numpy(group.answers.part), torch.from_numpy(group.answers.offset), score)
    if not filtered:
        everything = np.arange(len(anchors))
        queries = QuerySet(group.side, rel, anchors, answers=answers)
        return [_Part(everything, -1, queries, RankState.empty(len(anchors), k))]
    pieces = []
    for anchor_part in np.unique(group.anchors.part).tolist():
        where = np.flatnonzero(group.anchors.part == anchor_part)
        index = torch.from_numpy(where)
        queries = QuerySet(
            group.side,
            rel if isinstance(rel, int) else rel[index],
            anchors[index],
            torch.from_numpy(group.anchors.offset[where]),
            _select(answers, index),
        )
        pieces.append(_Part(where, anchor_part, queries, RankState.empty(len(where), k)))
    return pieces


def _select(answers: Answers | None, index: LongTensorType) -> Answers | None:
    """The answers of the queries at ``index``."""
    if answers is None:
        return None
    return Answers(answers.partition[index], answers.offset[index], answers.score[index])


def _joined(split: list[_Part], count: int, k: int, with_answers: bool) -> Ranked:
    """The pieces' states put back in the group's query order."""
    scores = torch.empty((count, k), dtype=torch.float32)
    partitions = torch.empty((count, k), dtype=torch.int64)
    offsets = torch.empty((count, k), dtype=torch.int64)
    rank = torch.zeros(count, dtype=torch.int64)
    partition_rank = torch.zeros(count, dtype=torch.int64)
    answer_score = torch.zeros(count, dtype=torch.float32)
    for piece in split:
        at = torch.from_numpy(piece.rows)
        scores[at], partitions[at], offsets[at] = piece.state.scores, piece.state.partitions, piece.state.offsets
        rank[at], partition_rank[at] = piece.state.answer_rank, piece.state.answer_partition_rank
        if piece.queries.answers is not None:
            answer_score[at] = piece.queries.answers.score
    if not with_answers:
        return Ranked(scores, partitions, offsets)
    return Ranked(scores, partitions, offsets, answer_score, rank, partition_rank)


__all__ = ["Located", "Ranked", "TargetGroup", "rank_targets"]
