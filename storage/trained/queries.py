"""Queries by name in, results by name out: the groups predict and score work on, and predict's table.

A query names an anchor entity and a relation; its relation says which entity types the
anchor and the ranked entities are (standard mode: that relation's sides; dynamic mode: the
template's). Queries are grouped by relation in standard mode (each group ranks one type
through one operator) and kept as one group in dynamic mode (each query's relation is a row
of the operator's parameters). Every bad name of a call is found before any row is read, and
reported at once (:class:`~storage.trained.name_index.UnknownEntityError`: the first by
position in full).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pbg_core.errors import UsageError
from pbg_core.types import EntityName, Side
from storage.trained.name_index import Lookup, NameIndex, NameProblem, UnknownEntityError
from storage.trained.targets import Located, Ranked, TargetGroup

ROLES = {Side.LHS: "head", Side.RHS: "tail"}


@dataclass(frozen=True)
class RelationGroup:
    """Queries of one relation (standard mode) or of all relations (dynamic mode).

    Attributes:
        rel: The relation id, or each query's ``[Q]`` (dynamic mode).
        lhs: The entity type of the heads.
        rhs: The entity type of the tails.
        positions: The queries' positions in the caller's lists.
    """

    rel: int | np.ndarray
    lhs: EntityName
    rhs: EntityName
    positions: np.ndarray


class Queries:
    """Groups names by relation and finds them, collecting every bad name of a call.

    Args:
        config: The model's config (relations, entities, dynamic_relations).
        names: The model's names.
        relations: Each query's relation name.
        argument: How the caller's relation list is called in messages (``relations``), or "".
    """

    def __init__(self, config: Any, names: NameIndex, relations: Sequence[str], argument: str) -> None:
        self.config = config
        self.names = names
        self.relations = list(relations)
        self.problems: list[NameProblem] = []
        ids = names.relation_ids(self.relations, argument)
        self.groups = _relation_groups(config, ids)

    def locate(
        self, names: Sequence[str], entity: EntityName, role: str, argument: str, group: RelationGroup
    ) -> Located:
        """Where the names at ``group.positions`` of ``names`` are in ``entity`` (problems kept for :meth:`check`).

        Raises:
            UsageError: ``entity`` is featurized (its rows are per feature, not per entity).
        """
        relation = self.relations[int(group.positions[0])]
        if self.config.entities[entity].featurized:
            raise UsageError(
                f"relation {relation!r} takes entity type {entity!r} as {role}, which is featurized: its "
                "embeddings are per feature, not per entity, so its entities cannot be looked up or ranked"
            )
        picked = [names[i] for i in group.positions]
        relations = [self.relations[i] for i in group.positions]
        lookup = Lookup(entity, role, argument, relations, group.positions)
        part, offset, problems = self.names.find(picked, lookup)
        self.problems += problems
        return Located(entity, part, offset)

    def check(self) -> None:
        """Raise the bad names found so far, the first by position in full.

        Raises:
            UnknownEntityError: see :class:`~storage.trained.name_index.UnknownEntityError`.
        """
        if self.problems:
            detailed = [p for p in self.problems if p.detail]
            first = min(detailed, key=lambda p: p.position if p.position is not None else -1)
            rest = sorted((p for p in self.problems if p is not first), key=lambda p: p.position or 0)
            raise UnknownEntityError([first, *rest])

    def targets(
        self, side: Side, anchors: Sequence[str], answers: Sequence[str] | None, argument: str
    ) -> list[TargetGroup]:
        """The groups ranking ``side`` for ``anchors`` (named in ``argument``), with their ``answers``.

        Raises:
            UnknownEntityError: bad anchor or answer names.
            UsageError: a featurized entity type.
        """
        groups = []
        for group in self.groups:
            anchor_type, target = side.other.pick(group.lhs, group.rhs), side.pick(group.lhs, group.rhs)
            located = self.locate(anchors, anchor_type, ROLES[side.other], argument, group)
            truths = None if answers is None else self.locate(answers, target, ROLES[side], "answers", group)
            counts = self.names.table(target).counts
            groups.append(TargetGroup(side, group.rel, located, target, counts, truths))
        self.check()
        return groups


def _relation_groups(config: Any, ids: np.ndarray) -> list[RelationGroup]:
    """Queries by relation id in order of first appearance (standard mode), or all in one (dynamic mode)."""
    if config.dynamic_relations:
        template = config.relations[0]
        return [RelationGroup(ids, template.lhs, template.rhs, np.arange(len(ids)))]
    groups = []
    for rel in dict.fromkeys(ids.tolist()):
        spec = config.relations[rel]
        groups.append(RelationGroup(int(rel), spec.lhs, spec.rhs, np.flatnonzero(ids == rel)))
    return groups


def prediction_table(
    side: Side,
    names: NameIndex,
    queries: Queries,
    groups: Sequence[TargetGroup],
    ranked: Sequence[Ranked],
    anchors: Sequence[str],
    answers: Sequence[str] | None,
) -> pa.Table:
    """Predict's rows: per query its top entities in order (one row of nulls if none is left).

    Columns ``query, head, relation, tail, rank, score``; with answers also ``answer,
    answer_score, answer_rank, answer_partition_rank``.
    """
    query, rank, score = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float32)]
    found = [pa.array([], pa.string())]
    for group, result, positions in zip(groups, ranked, (g.positions for g in queries.groups), strict=True):
        valid = result.partitions >= 0
        count = valid.sum(dim=1).numpy()
        empty = np.flatnonzero(count == 0)
        rows, cols = np.nonzero(valid.numpy())
        query += [positions[rows], positions[empty]]
        rank += [cols + 1, np.zeros(len(empty), dtype=np.int64)]
        score += [result.scores.numpy()[rows, cols], np.full(len(empty), np.nan, dtype=np.float32)]
        entity = names.names_at(group.target, result.partitions.numpy()[rows, cols], result.offsets.numpy()[rows, cols])
        found += [entity.cast(pa.string()), pa.nulls(len(empty), pa.string())]
    query_at, rank_at = np.concatenate(query), np.concatenate(rank)
    order = np.lexsort((rank_at, query_at))
    take = pa.array(query_at[order])
    null = pa.array(rank_at[order] == 0)
    columns = {
        "query": take,
        ROLES[side.other]: pa.array(list(anchors), pa.string()).take(take),
        "relation": pa.array(queries.relations, pa.string()).take(take),
        ROLES[side]: pa.concat_arrays(found).take(pa.array(order)),
        "rank": pa.array(rank_at[order], mask=null.to_numpy(zero_copy_only=False)),
        "score": pa.array(np.concatenate(score)[order], mask=null.to_numpy(zero_copy_only=False)),
    }
    columns = {name: columns[name] for name in ("query", "head", "relation", "tail", "rank", "score")}
    if answers is not None:
        columns |= _answer_columns(queries, ranked, answers, take)
    return pa.table(columns)


def _answer_columns(
    queries: Queries, ranked: Sequence[Ranked], answers: Sequence[str], take: pa.Array
) -> dict[str, pa.Array]:
    """The answer's name, score and ranks of each row's query."""
    total = len(queries.relations)
    score, rank, partition_rank = np.zeros(total, np.float32), np.zeros(total, np.int64), np.zeros(total, np.int64)
    for group, result in zip(queries.groups, ranked, strict=True):
        assert result.answer_score is not None and result.answer_rank is not None  # answers were given
        assert result.answer_partition_rank is not None
        score[group.positions] = result.answer_score.numpy()
        rank[group.positions] = result.answer_rank.numpy()
        partition_rank[group.positions] = result.answer_partition_rank.numpy()
    return {
        "answer": pa.array(list(answers), pa.string()).take(take),
        "answer_score": pa.array(score).take(take),
        "answer_rank": pa.array(rank).take(take),
        "answer_partition_rank": pa.array(partition_rank).take(take),
    }


__all__ = ["ROLES", "Queries", "RelationGroup", "prediction_table"]
