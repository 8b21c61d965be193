"""Partition topology: which entity types are partitioned on each side, and what a bucket needs.

PBG's rule (``util.get_partitioned_types``, ``EmbeddingHolder``):

- only entity types used by some relation on a side count for that side;
- a type with 1 partition is *unpartitioned*: it is always resident, stored as
  partition :data:`~pbg_core.types.UNPARTITIONED` (0), and shared by every bucket;
- all partitioned types on one side must share one partition count, which is
  that side's ``nparts``; a side without partitioned types has ``nparts == 1``;
- if both sides have a single partition, every type counts as partitioned (with
  one partition), so the whole model is swapped like partition 0 of a 1x1 grid;
- featurized types must stay unpartitioned (PBG issue #35).

The topology is a pure function of those flat inputs; it never reads a config.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pbg_core.errors import ConfigError
from pbg_core.types import UNPARTITIONED, Bucket, EntityName, PartitionKey, Side


@dataclass(frozen=True)
class PartitionTopology:
    """Partitioned and unpartitioned entity types per side and the bucket grid.

    Build it with :meth:`build`; the constructor only stores already-checked values.

    Attributes:
        num_partitions: Partition count of every entity type used by a relation.
        nparts_lhs: Number of LHS partitions (rows of the bucket grid).
        nparts_rhs: Number of RHS partitions (columns of the bucket grid).
        lhs_types: Entity types appearing on the LHS of some relation.
        rhs_types: Entity types appearing on the RHS of some relation.
        partitioned_types: Types swapped per bucket (on whichever sides they appear).
    """

    num_partitions: Mapping[EntityName, int]
    nparts_lhs: int
    nparts_rhs: int
    lhs_types: frozenset[EntityName]
    rhs_types: frozenset[EntityName]
    partitioned_types: frozenset[EntityName]

    @classmethod
    def build(
        cls,
        entities: Mapping[EntityName, int],
        relations: Sequence[tuple[EntityName, EntityName]],
        featurized: Collection[EntityName] = (),
    ) -> PartitionTopology:
        """Check the partition counts and build the topology.

        Args:
            entities: Entity type name -> ``num_partitions`` (>= 1).
            relations: ``(lhs entity type, rhs entity type)`` of every relation.
            featurized: Names of featurized entity types.

        Returns:
            The topology.

        Raises:
            ConfigError: listing every problem: unknown entity types in relations, counts < 1,
                partitioned featurized types, mixed partition counts on a side, no relations.
        """
        problems = _check_inputs(entities, relations, featurized)
        if problems:
            raise ConfigError(problems)
        lhs_types = frozenset(lhs for lhs, _ in relations)
        rhs_types = frozenset(rhs for _, rhs in relations)
        nparts_lhs, lhs_problem = _side_nparts(Side.LHS, lhs_types, entities)
        nparts_rhs, rhs_problem = _side_nparts(Side.RHS, rhs_types, entities)
        side_problems = [p for p in (lhs_problem, rhs_problem) if p]
        if side_problems:
            raise ConfigError(side_problems)
        used = lhs_types | rhs_types
        if nparts_lhs == 1 and nparts_rhs == 1:
            partitioned = frozenset(used)
        else:
            partitioned = frozenset(t for t in used if entities[t] > 1)
        return cls(
            num_partitions={t: entities[t] for t in sorted(used)},
            nparts_lhs=nparts_lhs,
            nparts_rhs=nparts_rhs,
            lhs_types=lhs_types,
            rhs_types=rhs_types,
            partitioned_types=partitioned,
        )

    # ---- per side -------------------------------------------------------------------------
    def nparts(self, side: Side) -> int:
        """Number of partitions of ``side``."""
        return side.pick(self.nparts_lhs, self.nparts_rhs)

    def types(self, side: Side) -> frozenset[EntityName]:
        """Entity types appearing on ``side``."""
        return side.pick(self.lhs_types, self.rhs_types)

    def partitioned(self, side: Side) -> set[EntityName]:
        """Partitioned entity types on ``side``."""
        return set(self.types(side) & self.partitioned_types)

    def unpartitioned(self, side: Side) -> set[EntityName]:
        """Unpartitioned entity types on ``side`` (always resident, partition 0)."""
        return set(self.types(side) - self.partitioned_types)

    def is_partitioned(self, entity: EntityName) -> bool:
        """Whether ``entity`` is swapped per bucket."""
        self._require_known(entity)
        return entity in self.partitioned_types

    # ---- buckets --------------------------------------------------------------------------
    def buckets(self) -> list[Bucket]:
        """Every bucket of the grid in lexicographic order (lhs major)."""
        return [Bucket(lhs, rhs) for lhs in range(self.nparts_lhs) for rhs in range(self.nparts_rhs)]

    def side_partitions(self, bucket: Bucket, side: Side) -> list[PartitionKey]:
        """The (entity type, partition) pairs ``side`` of ``bucket`` reads, sorted.

        Partitioned types are at the bucket's partition of that side; unpartitioned
        types are at :data:`UNPARTITIONED`.
        """
        self._check_bucket(bucket)
        part = bucket.get_partition(side)
        return sorted(
            (entity, part if entity in self.partitioned_types else UNPARTITIONED) for entity in self.types(side)
        )

    def bucket_partitions(self, bucket: Bucket) -> list[PartitionKey]:
        """The partitioned (entity type, partition) pairs ``bucket`` needs in memory, sorted.

        These are the ones swapped between buckets; unpartitioned types are not listed
        (see :meth:`unpartitioned_keys`).
        """
        needed = {
            key for side in Side for key in self.side_partitions(bucket, side) if key[0] in self.partitioned_types
        }
        return sorted(needed)

    def partitioned_keys(self) -> list[PartitionKey]:
        """Every (partitioned type, partition) pair of the run, sorted."""
        return sorted((t, p) for t in self.partitioned_types for p in range(self.num_partitions[t]))

    def unpartitioned_keys(self) -> list[PartitionKey]:
        """``(type, UNPARTITIONED)`` for every unpartitioned type, sorted."""
        return sorted((t, UNPARTITIONED) for t in self.num_partitions if t not in self.partitioned_types)

    def slots_needed(self, entity: EntityName) -> int:
        """Shared-memory slots :class:`~pbg_core.parallel.memory.EmbeddingPool` needs for ``entity``.

        A partitioned type on both sides holds two partitions at once in an
        off-diagonal bucket; every other type holds one (the swap evicts before it
        loads). One partition in total never needs more than one slot.
        """
        self._require_known(entity)
        two_sided = entity in self.lhs_types and entity in self.rhs_types
        if entity in self.partitioned_types and two_sided and self.num_partitions[entity] > 1:
            return 2
        return 1

    def resident_slots(self, requested: int | None = None) -> dict[EntityName, int]:
        """Partitions of each partitioned type kept in memory while training.

        At least what one bucket needs (:meth:`slots_needed`), at most every partition of the
        type; ``requested`` (``resident_partitions``) between the two, None: the least.
        """
        slots = {}
        for entity in sorted(self.partitioned_types):
            least = self.slots_needed(entity)
            slots[entity] = least if requested is None else min(self.num_partitions[entity], max(least, requested))
        return slots

    # ---- checks ---------------------------------------------------------------------------
    def _require_known(self, entity: EntityName) -> None:
        if entity not in self.num_partitions:
            known = ", ".join(sorted(self.num_partitions))
            raise ConfigError([f"entity type {entity!r} is not used by any relation; known: {known}"])

    def _check_bucket(self, bucket: Bucket) -> None:
        if not (0 <= bucket.lhs < self.nparts_lhs and 0 <= bucket.rhs < self.nparts_rhs):
            raise ValueError(
                f"bucket {bucket} is outside the {self.nparts_lhs} x {self.nparts_rhs} bucket grid "
                f"(lhs in [0, {self.nparts_lhs}), rhs in [0, {self.nparts_rhs}))"
            )


def _check_inputs(
    entities: Mapping[EntityName, int],
    relations: Sequence[tuple[EntityName, EntityName]],
    featurized: Collection[EntityName],
) -> list[str]:
    """Every problem with the flat inputs, one line each."""
    problems: list[str] = []
    if not relations:
        problems.append("relations: at least one relation is required; got none")
    known = ", ".join(sorted(entities)) or "(none)"
    for index, (lhs, rhs) in enumerate(relations):
        for side, name in ((Side.LHS, lhs), (Side.RHS, rhs)):
            if name not in entities:
                problems.append(f"relations.{index}.{side.key}: unknown entity type {name!r}; known: {known}")
    for name, count in entities.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            problems.append(f"entities.{name}.num_partitions: {count!r} is not allowed; must be an int >= 1")
        elif name in featurized and count != 1:
            problems.append(
                f"entities.{name}.num_partitions: {count} is not allowed for a featurized entity "
                "type; featurized types must be unpartitioned (num_partitions = 1)"
            )
    for name in featurized:
        if name not in entities:
            problems.append(f"featurized entity type {name!r} is unknown; known: {known}")
    return problems


def _side_nparts(side: Side, types: Iterable[EntityName], entities: Mapping[EntityName, int]) -> tuple[int, str | None]:
    """The side's partition count, or a problem naming the types whose counts differ."""
    partitioned = {t: entities[t] for t in sorted(types) if entities[t] > 1}
    counts = set(partitioned.values())
    if len(counts) > 1:
        listed = ", ".join(f"{t}={n}" for t, n in partitioned.items())
        return 1, (
            f"{side.key}: all partitioned entity types on one side must have a single value of "
            f"num_partitions (types with 1 partition are unpartitioned); got {listed}"
        )
    return (counts.pop() if counts else 1), None
