"""A trained model's names: entity names -> (partition, offset) per type, relation names -> ids, and back.

- **Entities**: one :class:`~storage.remap.matching.NameTable` per entity type (one pyarrow
  string array, about 20 bytes per name beside the names' own bytes, no Python object per
  name), read only when the type is first used, from the names the checkpoint's rows belong to
  (:class:`~storage.reader_names.RowLabels`). Names are looked up with pyarrow's hash join
  (``index_in``); names are unique within a type (``pbg import`` writes each once).
- **Relations**: standard mode: ``config.relations`` by position (a name given twice there
  means its first relation); dynamic mode: the relation types the model's parameter rows
  belong to (the checkpoint's record, :meth:`storage.checkpoint_reader.CheckpointReader.relation_names`).
- **Bad names** are one :class:`UnknownEntityError`: the first bad name with what is wrong with
  it (unknown, with up to 3 closest names of its type; or a name of another entity type than
  the relation takes on that side, named as such), then how many more there are. An unknown
  relation or entity type (:func:`check_entity_type`) is named with its closest ones too.

Closest names are searched on the failure path only, in a type of any size: an exact match
ignoring case, then :func:`difflib.get_close_matches` among the names of a similar length
(and, beyond :data:`CLOSEST_POOL` of them, the same first letter); relations and entity types,
a short list, are compared whatever their length.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pbg_core.errors import UnknownNameError
from pbg_core.types import EntityName
from storage.remap.matching import NameTable
from storage.trained.row_ids import GlobalIds, RowIds

CLOSEST = 3  # closest names shown for an unknown one
CLOSEST_POOL = 50_000  # names compared with difflib at most (it is quadratic in a name's length)
CLOSEST_LENGTH = 3  # a close name is at most this many characters longer or shorter
SHOWN_MORE = 3  # further bad names quoted after the first one
SHOWN_RELATIONS = 20  # known relation names listed for an unknown one


@dataclass(frozen=True)
class NameProblem:
    """One name that cannot be used where it was given.

    Attributes:
        name: The name as given.
        detail: What is wrong with it (``unknown head 'asprin' of type 'drug' (closest: 'aspirin')``).
        argument: The caller's list it came from (``heads``), or "" for a single name.
        position: Its index in that list, or None for a single name.
    """

    name: str
    detail: str
    argument: str = ""
    position: int | None = None

    def where(self) -> str:
        """``heads[17]``, or "" for a single name."""
        return f"{self.argument}[{self.position}]" if self.position is not None else self.argument


class NameProblemsError(Exception):
    """An error made of :class:`NameProblem` s: the first one in full, then how many more.

    Mixed in before a :class:`~pbg_core.errors.PbgError` class, which gives the error its kind.

    Args:
        problems: Every problem name, in the order to report them (the first in full).

    Attributes:
        problems: As given; :meth:`message` renders them with other positions (a file's lines).
    """

    def __init__(self, problems: Sequence[NameProblem]) -> None:
        self.problems = list(problems)
        super().__init__(self.message())

    def message(self, where: Callable[[NameProblem], str] = NameProblem.where) -> str:
        """The one line, each position shown by ``where`` (default: ``heads[17]``)."""
        return problems_line(self.problems, where)

    def __reduce__(self) -> tuple[type, tuple[list[NameProblem]]]:
        # Errors cross process and task boundaries: rebuilt from the problems, not the message.
        return (type(self), (self.problems,))


class UnknownEntityError(NameProblemsError, UnknownNameError):
    """Entity or relation names a model cannot take (see :class:`NameProblemsError`)."""


def problems_line(problems: Sequence[NameProblem], where: Callable[[NameProblem], str] = NameProblem.where) -> str:
    """The first of ``problems`` in full, then how many more (up to :data:`SHOWN_MORE` quoted), positions by ``where``."""
    first, rest = problems[0], problems[1:]
    place = where(first)
    text = f"{place}: {first.detail}" if place else first.detail
    if rest:
        shown = ", ".join(f"{p.name!r} ({where(p)})" if where(p) else repr(p.name) for p in rest[:SHOWN_MORE])
        text += f"; {len(rest)} more not usable: {shown}{', ...' if len(rest) > SHOWN_MORE else ''}"
    return text


@dataclass(frozen=True)
class Lookup:
    """Where names are looked up: entity type ``entity``, as the ``role`` (head, tail) of each name's relation.

    Attributes:
        entity: The entity type the names must be of.
        role: ``head`` or ``tail`` (or ``entity``), in messages.
        argument: The caller's list (``heads``), or "" for a single name.
        relations: Each name's relation name (for messages), or None.
        positions: Each name's position in the caller's list (default: its index here).
    """

    entity: EntityName
    role: str
    argument: str = ""
    relations: Sequence[str] | None = None
    positions: np.ndarray | None = None


class NameIndex:
    """The names of a model's entity types and relation types.

    Args:
        loaders: Entity type -> a function building its table (called once, when first needed).
        relations: Relation names by id.
    """

    def __init__(self, loaders: Mapping[EntityName, Callable[[], NameTable]], relations: Sequence[str]) -> None:
        self._loaders = dict(loaders)
        self._tables: dict[EntityName, NameTable] = {}
        self.relations = list(relations)
        self._relation_ids: dict[str, int] = {}
        for rel, name in reversed(list(enumerate(self.relations))):
            self._relation_ids[name] = rel  # the first relation of a name given twice

    @property
    def entity_types(self) -> list[EntityName]:
        """The entity types whose names are known (featurized ones are not)."""
        return list(self._loaders)

    def table(self, entity: EntityName) -> NameTable:
        """``entity``'s names, read on first use."""
        if entity not in self._tables:
            self._tables[entity] = self._loaders[entity]()
        return self._tables[entity]

    def count(self, entity: EntityName) -> int:
        """Entities of ``entity``, over all partitions."""
        return len(self.table(entity))

    def counts(self, entity: EntityName) -> Sequence[int]:
        """Entities of ``entity`` per partition: the rows each of its partition files must hold."""
        return self.table(entity).counts

    def find(self, names: Sequence[str], lookup: Lookup) -> tuple[np.ndarray, np.ndarray, list[NameProblem]]:
        """(partition, offset) of each name in ``lookup.entity`` (-1 where not found), and the problems found."""
        part, offset = self.rows_of(names, lookup.entity)
        missing = np.flatnonzero(part < 0)
        problems = [self._problem(names, int(i), lookup) for i in missing[:1]]
        problems += [NameProblem(names[int(i)], "", lookup.argument, _position(lookup, int(i))) for i in missing[1:]]
        return part, offset, problems

    def rows_of(self, names: Sequence[str], entity: EntityName) -> tuple[np.ndarray, np.ndarray]:
        """(partition, offset) of each name in ``entity``, -1 where it has no such name (int64; no error)."""
        table = self.table(entity)
        index = _index_in(names, table.names)
        found = np.where(index >= 0, index, 0)
        return np.where(index >= 0, table.part[found], -1), np.where(index >= 0, table.offset[found], -1)

    def locate(self, names: Sequence[str], lookup: Lookup) -> tuple[np.ndarray, np.ndarray]:
        """(partition, offset) of each name in ``lookup.entity``.

        Raises:
            UnknownEntityError: a name is not of that type (the first one in full: unknown, with the
                closest names of the type, or of another type, named).
        """
        part, offset, problems = self.find(names, lookup)
        if problems:
            raise UnknownEntityError(problems)
        return part, offset

    def names_at(self, entity: EntityName, part: np.ndarray, offset: np.ndarray) -> pa.Array:
        """The names of ``entity`` at (``part``, ``offset``): a pyarrow string array."""
        table = self.table(entity)
        return table.names.take(pa.array(GlobalIds(table.counts).global_ids(RowIds.of(part, offset)).numpy()))

    def relation_ids(self, names: Sequence[str], argument: str = "") -> np.ndarray:
        """The id of each relation name (int64).

        Raises:
            UnknownEntityError: an unknown relation name (the first with its closest names, as
                :func:`closest` finds them, and the known ones).
        """
        ids = np.array([self._relation_ids.get(name, -1) for name in names], dtype=np.int64)
        missing = np.flatnonzero(ids < 0)
        if missing.size:
            first = names[int(missing[0])]
            distinct = list(dict.fromkeys(self.relations))  # in id order, each name once
            close = closest(str(first), pa.array(distinct, pa.string()), any_length=True)
            hint = f" (closest: {', '.join(map(repr, close))})" if close else ""
            known = ", ".join(distinct[:SHOWN_RELATIONS])
            more = f", ... ({len(distinct)} in all)" if len(distinct) > SHOWN_RELATIONS else ""
            detail = f"unknown relation {first!r}{hint}; known: {known}{more}"
            single = len(names) == 1 and not argument
            problems = [
                NameProblem(names[int(i)], detail if n == 0 else "", argument, None if single else int(i))
                for n, i in enumerate(missing)
            ]
            raise UnknownEntityError(problems)
        return ids

    def _problem(self, names: Sequence[str], i: int, lookup: Lookup) -> NameProblem:
        """What is wrong with ``names[i]``: of another type (named), else unknown (closest names)."""
        name = names[i]
        relation = lookup.relations[i] if lookup.relations is not None else None
        for other in self.entity_types:
            if other != lookup.entity and _index_in([name], self.table(other).names)[0] >= 0:
                takes = f"relation {relation!r} takes" if relation is not None else "wanted:"
                detail = f"{name!r} is of type {other!r}; {takes} a {lookup.entity!r} as {lookup.role}"
                return NameProblem(name, detail, lookup.argument, _position(lookup, i))
        close = closest(name, self.table(lookup.entity).names)
        count = self.count(lookup.entity)
        hint = f"closest: {', '.join(map(repr, close))}" if close else f"no close name among its {count:,} names"
        detail = f"unknown {lookup.role} {name!r} of type {lookup.entity!r} ({hint})"
        return NameProblem(name, detail, lookup.argument, _position(lookup, i))


def _position(lookup: Lookup, i: int) -> int | None:
    """A name's position in its list, None for a single name."""
    if not lookup.argument:
        return None
    return int(lookup.positions[i]) if lookup.positions is not None else i


def _index_in(names: Sequence[str], value_set: pa.Array) -> np.ndarray:
    """Each name's index in ``value_set`` (-1: absent), int64."""
    query = pa.array(list(names), type=pa.large_string())
    index = pc.index_in(query, value_set=value_set).fill_null(-1)
    return np.asarray(index.to_numpy(zero_copy_only=False), dtype=np.int64)


def closest(name: str, names: pa.Array, n: int = CLOSEST, any_length: bool = False) -> list[str]:
    """Up to ``n`` names of ``names`` closest to ``name``: equal but for case first, then by difflib's ratio.

    ``any_length``: compare with names of every length (a short list: relations, entity types),
    not only those at most ``CLOSEST_LENGTH`` characters longer or shorter.
    """
    lowered = pc.utf8_lower(names)
    found = names.filter(pc.equal(lowered, name.lower())).to_pylist()[:n]
    pool = names
    if not any_length:
        lengths = pc.utf8_length(names)
        pool = names.filter(
            pc.and_(
                pc.greater_equal(lengths, len(name) - CLOSEST_LENGTH),
                pc.less_equal(lengths, len(name) + CLOSEST_LENGTH),
            )
        )
    if len(pool) > CLOSEST_POOL and name:
        pool = pool.filter(pc.starts_with(pc.utf8_lower(pool), name[:1].lower()))
    matches = difflib.get_close_matches(name, pool.slice(0, CLOSEST_POOL).to_pylist(), n=n, cutoff=0.6)
    return list(dict.fromkeys(found + matches))[:n]


def check_entity_type(config: Any, entity_type: EntityName, known: Sequence[EntityName]) -> None:
    """Refuse an entity type that is not one of ``known`` (those with one embedding per entity).

    Raises:
        UnknownNameError: naming the closest types (:func:`closest`), the
            known ones, and the featurized ones if any.
    """
    if entity_type not in known:
        featurized = [name for name, entity in config.entities.items() if entity.featurized]
        note = f" (featurized, so not per entity: {featurized})" if featurized else ""
        close = closest(str(entity_type), pa.array(list(known), pa.string()), any_length=True)
        hint = f" (closest: {', '.join(map(repr, close))})" if close else ""
        raise UnknownNameError(f"entity type {entity_type!r}{hint} is not one of {list(known)}{note}")


__all__ = ["Lookup", "NameIndex", "NameProblem", "UnknownEntityError", "check_entity_type", "closest", "problems_line"]
