"""The names of ``similar``: names in, each found in its entity type; nearest entities out, by name.

A name is looked up in the entity type given (``entity_type``, ``--entity-type``), else in every
entity type of the model with one embedding per entity: it must be an entity of exactly one of
them. Every bad name of a call is found before any row is read and reported in one line, the
first in full: an unknown name with the closest known ones
(:class:`~storage.trained.name_index.UnknownEntityError`), a name of several types with those
types (:class:`AmbiguousNameError`). Names of different types in one call are searched type by
type (:class:`NameGroup`); the answers come back in the caller's order (:func:`similar_table`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pbg_core.errors import UsageError
from pbg_core.types import EntityName, FloatTensorType
from storage.trained.name_index import (
    Lookup,
    NameIndex,
    NameProblem,
    NameProblemsError,
    UnknownEntityError,
    closest,
)
from storage.trained.row_ids import RowIds

ROLE = "entity"  # how a name is called in messages
COLUMNS = ("query", "entity", "entity_type", "rank", "neighbour", "score")


class AmbiguousNameError(NameProblemsError, UsageError):
    """Names that are entities of several types, when no entity type is given (see
    :class:`~storage.trained.name_index.NameProblemsError`)."""


@dataclass(frozen=True)
class NameGroup:
    """The names of one entity type in a call.

    Attributes:
        entity: Their entity type.
        positions: Their positions in the caller's list (int64).
        ids: Their entities, in that order.
    """

    entity: EntityName
    positions: np.ndarray
    ids: RowIds


def locate_names(
    index: NameIndex, names: Sequence[str], entity_type: EntityName | None, argument: str
) -> list[NameGroup]:
    """Each name's entity, grouped by type in the order of ``index.entity_types``.

    Args:
        index: The model's names.
        names: The names.
        entity_type: Their type; None: each name's own (it must have exactly one).
        argument: The caller's list in messages (``names``), or "" for a single name.

    Raises:
        UnknownEntityError: a name that is no entity of ``entity_type`` (or of any type); the
            closest known names given.
        AmbiguousNameError: no ``entity_type``, and a name that is an entity of several types.
    """
    types = [entity_type] if entity_type is not None else index.entity_types
    if len(types) == 1:
        part, offset = index.locate(names, Lookup(types[0], ROLE, argument))
        return [NameGroup(types[0], np.arange(len(names)), RowIds.of(part, offset))] if len(names) else []
    found = [index.rows_of(names, entity) for entity in types]
    present = np.stack([part >= 0 for part, _ in found])  # [types, names]
    owners = present.sum(axis=0)
    unknown, several = np.flatnonzero(owners == 0), np.flatnonzero(owners > 1)
    if unknown.size:
        first = NameProblem(
            names[unknown[0]], _unknown_detail(index, names[unknown[0]]), argument, _at(argument, unknown[0])
        )
        rest = [NameProblem(names[i], "", argument, _at(argument, i)) for i in unknown[1:]]
        raise UnknownEntityError([first, *rest])
    if several.size:
        problems = []
        for n, i in enumerate(several.tolist()):
            shown = ", ".join(repr(entity) for entity, row in zip(types, present, strict=True) if row[i])
            detail = f"{names[i]!r} is an entity of each of the types {shown}; give the one to search (--entity-type T; entity_type= in Python)"
            problems.append(NameProblem(names[i], detail if n == 0 else "", argument, _at(argument, i)))
        raise AmbiguousNameError(problems)
    owner = present.argmax(axis=0)
    groups = []
    for t, entity in enumerate(types):
        where = np.flatnonzero(owner == t)
        if where.size:
            groups.append(NameGroup(entity, where, RowIds.of(found[t][0][where], found[t][1][where])))
    return groups


def _at(argument: str, i: int) -> int | None:
    """A name's position in the caller's list, None for a single name."""
    return int(i) if argument else None


def _unknown_detail(index: NameIndex, name: str) -> str:
    """``unknown entity 'x' of any type (closest: ...)``, the closest names searched in every type."""
    every = pa.concat_arrays([index.table(entity).names.cast(pa.large_string()) for entity in index.entity_types])
    close = closest(name, every)
    types = ", ".join(map(repr, index.entity_types))
    hint = f"closest: {', '.join(map(repr, close))}" if close else f"no close name among their {len(every):,} names"
    return f"unknown {ROLE} {name!r} of any type ({types}) ({hint})"


def similar_table(
    index: NameIndex,
    names: Sequence[str],
    groups: Sequence[NameGroup],
    found: Sequence[tuple[FloatTensorType, RowIds]],
) -> pa.Table:
    """One row per (name, neighbour), by the name's position then rank; a name with no neighbour: one row of nulls.

    Args:
        index: The model's names (the neighbours' names).
        names: The caller's names.
        groups: Where they were found (:func:`locate_names`).
        found: Per group, the neighbours' scores ``[Q, k]`` and entities (partition -1: an empty slot).

    Returns:
        Columns ``query`` (the name's position), ``entity`` (the name), ``entity_type``, ``rank``
        (1 = nearest), ``neighbour``, ``score``.
    """
    query, rank, score = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float32)]
    neighbour, entity_type = [pa.array([], pa.string())], [pa.array([], pa.string())]
    for group, (scores, ids) in zip(groups, found, strict=True):
        valid = (ids.partitions >= 0).numpy()
        empty = np.flatnonzero(valid.sum(axis=1) == 0)
        rows, cols = np.nonzero(valid)
        query += [group.positions[rows], group.positions[empty]]
        rank += [cols + 1, np.zeros(len(empty), np.int64)]
        score += [scores.numpy()[rows, cols], np.full(len(empty), np.nan, np.float32)]
        at = index.names_at(group.entity, ids.partitions.numpy()[rows, cols], ids.offsets.numpy()[rows, cols])
        neighbour += [at.cast(pa.string()), pa.nulls(len(empty), pa.string())]
        entity_type.append(pa.array([group.entity] * (len(rows) + len(empty)), pa.string()))
    query_at, rank_at = np.concatenate(query), np.concatenate(rank)
    order = pa.array(np.lexsort((rank_at, query_at)))
    take = pa.array(query_at).take(order)
    null = (rank_at == 0)[order.to_numpy()]
    return pa.table(
        {
            "query": take,
            "entity": pa.array(list(names), pa.string()).take(take),
            "entity_type": pa.concat_arrays(entity_type).take(order),
            "rank": pa.array(rank_at[order.to_numpy()], mask=null),
            "neighbour": pa.concat_arrays(neighbour).take(order),
            "score": pa.array(np.concatenate(score)[order.to_numpy()], mask=null),
        }
    )


__all__ = ["COLUMNS", "AmbiguousNameError", "NameGroup", "locate_names", "similar_table"]
