"""The memory plan of a training run: how many partitions stay resident, and what the run needs.

Pure arithmetic on sizes (no I/O): the caller reads the entity counts, the largest bucket and the
memory available (:mod:`storage.host`) and hands them in. The figures, in bytes:

- a *slot* holds partition ``p`` of every partitioned entity type: the sum over those types of
  ``largest partition's rows x (dim x 4 + 4)`` (float32 embeddings plus the one float32
  row-Adagrad accumulator per row that :class:`~pbg_core.training.optimizers.RowAdagrad` keeps;
  a featurized type's rows are its features);
- ``resident`` slots stay in memory between buckets, and up to :data:`IN_FLIGHT` more are in
  flight (one partition loading ahead, one being written behind); when every partition is
  resident nothing is loaded or evicted mid-pass, so none is in flight;
- unpartitioned entity types are always resident: ``rows x (dim x 4 + 4)`` each;
- the model (relation operators, global embeddings) and its Adagrad sums: ``2 x 4`` bytes
  per parameter;
- one chunk of the largest bucket, at :data:`EDGE_BYTES` per edge;
- :data:`FIXED_OVERHEAD_BYTES` for the interpreters, torch, Prefect and the worker processes.

``total = (resident + in_flight) x slot + unpartitioned + model + edges + overhead``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pbg_core.config import ConfigSchema
from pbg_core.errors import PbgError
from pbg_core.session.iterations import compute_num_edge_chunks
from pbg_core.session.partitions import PartitionTopology
from pbg_core.types import Bucket, EntityName, PartitionKey

if TYPE_CHECKING:  # the port imports torch; the preflight of `pbg train` must not
    from pbg_core.ports import EdgeSource

GIB = 1 << 30
FLOAT_BYTES = 4
IN_FLIGHT = 2
# Measured (bench/_common.run_measured, the process tree's peak VmRSS, 50 ms samples) for
# `pbg train` of the bundled UMLS graph (135 entities, d=200, one epoch; embeddings ~0.1 MB):
# 760-778 MiB with workers=1 (2 processes), 1144-1147 MiB with workers=2 (3 processes; PSS
# 820-824 MiB). Each further worker adds ~370 MiB of VmRSS (torch imported again), most of it
# shared library pages. 1.5 GiB covers 2 workers with ~380 MiB to spare.
FIXED_OVERHEAD_BYTES = 3 * GIB // 2
# Per edge as the engine holds a chunk: lhs, rhs and rel as int64 (EdgeList widens rel even
# for one relation) = 24, a float32 weight = 4 (counted whether or not the file has one), the
# int64 training index = 8, and the shuffle's int64 permutation plus the permuted copy = 16.
EDGE_BYTES = 24 + 4 + 8 + 16
# A user-registered operator's size is unknown without building it: count the largest
# built-in one (affine: d x d + d).
OPERATOR_PARAMS: dict[str, Callable[[int], int]] = {
    "none": lambda d: 0,
    "translation": lambda d: d,
    "diagonal": lambda d: d,
    "linear": lambda d: d * d,
    "affine": lambda d: d * d + d,
    "complex_diagonal": lambda d: d,
}


class MemoryPlanError(PbgError, RuntimeError):
    """The run's partitions cannot fit in the memory available (one line: needed, available, what fits)."""


def row_bytes(dim: int) -> int:
    """Bytes of one resident row: ``dim`` float32 embeddings and one float32 Adagrad sum."""
    return dim * FLOAT_BYTES + FLOAT_BYTES


def operator_params(operator: str, dim: int) -> int:
    """Parameters of one relation operator of dimension ``dim`` (unknown operators: affine's)."""
    return OPERATOR_PARAMS.get(operator, OPERATOR_PARAMS["affine"])(dim)


def gb(num_bytes: float) -> str:
    """``num_bytes`` in decimal gigabytes, two decimals: ``2.49 GB``."""
    return f"{num_bytes / 1e9:.2f} GB"


@dataclass(frozen=True)
class EntitySize:
    """Rows and dimension of one entity type.

    Attributes:
        largest: Rows of its largest partition.
        total: Rows over all its partitions.
        partitions: Its partition count.
        dim: Embedding dimension.
        splittable: Whether more partitions could split it (featurized types must stay whole).
    """

    largest: int
    total: int
    partitions: int
    dim: int
    splittable: bool = True

    def largest_at(self, num_partitions: int) -> int:
        """Rows of its largest partition with ``num_partitions`` partitions, keeping today's imbalance."""
        if not self.splittable or num_partitions == self.partitions:
            return self.largest
        return math.ceil(self.largest * self.partitions / num_partitions)


@dataclass(frozen=True)
class RunSizes:
    """What a run holds, from its config and input files.

    Attributes:
        num_partitions: Partitions per side (the larger of the grid's two).
        two_sided: Some partitioned type is on both sides (an off-diagonal bucket needs 2 of it).
        partitioned: Partitioned types (swapped per bucket).
        unpartitioned: Always-resident types.
        model_bytes: The model's parameters and their Adagrad sums.
        chunk_edges: Edges of one chunk of the largest bucket.
    """

    num_partitions: int
    two_sided: bool
    partitioned: Mapping[EntityName, EntitySize]
    unpartitioned: Mapping[EntityName, EntitySize]
    model_bytes: int
    chunk_edges: int

    def slot_bytes(self, num_partitions: int | None = None) -> int:
        """Bytes of one slot (partition ``p`` of every partitioned type), at today's or another count."""
        n = self.num_partitions if num_partitions is None else num_partitions
        return sum(s.largest_at(n) * row_bytes(s.dim) for s in self.partitioned.values())

    def min_resident(self, num_partitions: int | None = None) -> int:
        """Slots a bucket needs: 2 for an off-diagonal bucket of a two-sided type, else 1."""
        n = self.num_partitions if num_partitions is None else num_partitions
        return 2 if self.two_sided and n > 1 else 1

    @property
    def unpartitioned_bytes(self) -> int:
        """The always-resident types."""
        return sum(s.total * row_bytes(s.dim) for s in self.unpartitioned.values())

    @property
    def edge_bytes(self) -> int:
        """One chunk of the largest bucket as the engine holds it."""
        return self.chunk_edges * EDGE_BYTES

    @property
    def fixed_bytes(self) -> int:
        """Everything but the slots: unpartitioned types, model, edges and the fixed overhead."""
        return self.unpartitioned_bytes + self.model_bytes + self.edge_bytes + FIXED_OVERHEAD_BYTES

    def need(self, resident: int, num_partitions: int | None = None) -> int:
        """Bytes needed with ``resident`` slots resident (plus those in flight)."""
        n = self.num_partitions if num_partitions is None else num_partitions
        return (resident + in_flight(n, resident)) * self.slot_bytes(n) + self.fixed_bytes


def in_flight(num_partitions: int, resident: int) -> int:
    """Slots in flight besides ``resident``: :data:`IN_FLIGHT`, fewer when (nearly) all are resident."""
    return max(0, min(IN_FLIGHT, num_partitions - resident))


@dataclass(frozen=True)
class Available:
    """Memory this run may use, and where the figure came from (for messages).

    Attributes:
        num_bytes: Bytes available.
        source: e.g. ``MemAvailable in /proc/meminfo``.
    """

    num_bytes: int
    source: str


@dataclass(frozen=True)
class MemoryPlan:
    """How many partitions a run keeps resident, and the memory that takes.

    Attributes:
        num_partitions: Partitions per side.
        resident: Slots kept resident between buckets.
        in_flight: Further slots loading ahead or being written behind.
        slot_bytes: Bytes of one slot.
        unpartitioned_bytes: Always-resident entity types.
        model_bytes: Model parameters and their Adagrad sums.
        edge_bytes: One chunk of the largest bucket.
        overhead_bytes: :data:`FIXED_OVERHEAD_BYTES`.
        available: Memory available and its source.
    """

    num_partitions: int
    resident: int
    in_flight: int
    slot_bytes: int
    unpartitioned_bytes: int
    model_bytes: int
    edge_bytes: int
    overhead_bytes: int
    available: Available

    @property
    def slots(self) -> int:
        """Slots allocated: resident plus in flight."""
        return self.resident + self.in_flight

    @property
    def total_bytes(self) -> int:
        """The plan's bound on the run's memory."""
        return (
            self.slots * self.slot_bytes
            + self.unpartitioned_bytes
            + self.model_bytes
            + self.edge_bytes
            + self.overhead_bytes
        )

    def describe(self) -> str:
        """One line: ``6 of 8 partitions resident + 2 in flight x 2.49 GB, ... = 21.4 GB of 23.1 GB available``."""
        small = f", unpartitioned {gb(self.unpartitioned_bytes)}" if self.unpartitioned_bytes else ""
        return (
            f"memory plan: {self.resident} of {self.num_partitions} partitions resident + {self.in_flight} in "
            f"flight x {gb(self.slot_bytes)}{small}, model {gb(self.model_bytes)}, edges {gb(self.edge_bytes)}, "
            f"overhead {self.overhead_bytes / GIB:.1f} GiB = {gb(self.total_bytes)} of "
            f"{gb(self.available.num_bytes)} available ({self.available.source})"
        )


def plan_memory(sizes: RunSizes, available: Available, requested: int | None = None) -> MemoryPlan:
    """Choose the resident partitions: ``requested`` (capped at the partition count), else as many as fit.

    Args:
        sizes: The run's sizes.
        available: Memory available.
        requested: The config's ``resident_partitions`` (None: as many as fit).

    Returns:
        The plan, whose :attr:`MemoryPlan.total_bytes` fits in ``available``.

    Raises:
        MemoryPlanError: even the minimum (a bucket's partitions plus those in flight) does not
            fit, naming the partition count that would; or ``requested`` is below that minimum
            or does not fit, naming how many would.
    """
    n, minimum = sizes.num_partitions, sizes.min_resident()
    if requested is not None and requested < minimum:
        raise MemoryPlanError(
            f"resident_partitions: {requested} is not allowed here; a bucket of this config needs "
            f"{minimum} partitions resident (an off-diagonal bucket of a type on both sides needs 2)"
        )
    if sizes.need(minimum) > available.num_bytes:
        raise MemoryPlanError(_too_few_partitions(sizes, available))
    fitting = max(r for r in range(minimum, n + 1) if sizes.need(r) <= available.num_bytes)
    resident = fitting if requested is None else min(requested, n)
    if resident > fitting:
        raise MemoryPlanError(
            f"resident_partitions: {requested} needs {_needs(sizes, resident)} = {gb(sizes.need(resident))}, "
            f"but {gb(available.num_bytes)} is available ({available.source}); at most {fitting} fit "
            "(lower it, or unset it to keep as many as fit)"
        )
    return MemoryPlan(
        num_partitions=n,
        resident=resident,
        in_flight=in_flight(n, resident),
        slot_bytes=sizes.slot_bytes(),
        unpartitioned_bytes=sizes.unpartitioned_bytes,
        model_bytes=sizes.model_bytes,
        edge_bytes=sizes.edge_bytes,
        overhead_bytes=FIXED_OVERHEAD_BYTES,
        available=available,
    )


def _needs(sizes: RunSizes, resident: int) -> str:
    """``2 resident + 2 in flight x 2.49 GB + 1.64 GB (unpartitioned, model, edges, overhead)``."""
    flying = in_flight(sizes.num_partitions, resident)
    return (
        f"{resident} resident + {flying} in flight x {gb(sizes.slot_bytes())} + {gb(sizes.fixed_bytes)} "
        "(unpartitioned types, model, edges, overhead)"
    )


def smallest_fitting_partitions(sizes: RunSizes, available: Available) -> int | None:
    """The smallest partition count above today's whose minimum fits, or None if none does.

    The need falls with the count (fewer rows per slot, at most 2 + 2 slots), so a binary
    search finds it; bounded by the largest type's rows (a partition of one row each).
    """
    low = sizes.num_partitions + 1
    high = max([low, *(s.total for s in sizes.partitioned.values() if s.splittable)])

    def fits(count: int) -> bool:
        return sizes.need(sizes.min_resident(count), count) <= available.num_bytes

    if not fits(high):
        return None
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return low


def _too_few_partitions(sizes: RunSizes, available: Available) -> str:
    """The one-line error when even the minimum does not fit."""
    minimum = sizes.min_resident()
    head = (
        f"memory: {sizes.num_partitions} partition(s) need at least {_needs(sizes, minimum)} = "
        f"{gb(sizes.need(minimum))}, but {gb(available.num_bytes)} is available ({available.source})"
    )
    count = smallest_fitting_partitions(sizes, available)
    splittable = sorted(name for name, s in sizes.partitioned.items() if s.splittable)
    if count is None or not splittable:
        return (
            f"{head}; no partition count fits: the unpartitioned types, model, edges and overhead alone "
            f"need {gb(sizes.fixed_bytes)} (make more memory available)"
        )
    return f"{head}; use num_partitions >= {count} for entity type(s) {', '.join(splittable)}"


def model_bytes(config: ConfigSchema, num_dynamic_relations: int) -> int:
    """The model's parameters (operators, global embeddings) and their Adagrad sums, from the config.

    Mirrors :func:`pbg_core.model.embedder.build_model` without building it (no torch): a
    static relation has one operator (on its RHS), dynamic mode two per relation type.
    """
    if config.dynamic_relations:
        template = config.relations[0]
        per_type = operator_params(template.operator, config.entity_dimension(template.rhs)) + operator_params(
            template.operator, config.entity_dimension(template.lhs)
        )
        params = per_type * num_dynamic_relations
    else:
        params = sum(operator_params(r.operator, config.entity_dimension(r.rhs)) for r in config.relations)
    if config.global_emb:
        params += sum(config.entity_dimension(name) for name in config.entities)
    return 2 * FLOAT_BYTES * params


def run_sizes(
    config: ConfigSchema,
    topology: PartitionTopology,
    counts: Mapping[PartitionKey, int],
    num_dynamic_relations: int,
    chunk_edges: int,
) -> RunSizes:
    """The sizes of a run from its config, its topology and its entity counts.

    Args:
        config: The validated config.
        topology: Its partition topology.
        counts: Rows per (entity type, partition) of every type a relation uses.
        num_dynamic_relations: Relation types in dynamic mode (0 otherwise).
        chunk_edges: Edges of one chunk of the largest bucket.
    """
    featurized = {name for name, entity in config.entities.items() if entity.featurized}

    def size(entity: EntityName) -> EntitySize:
        rows = [count for (name, _), count in counts.items() if name == entity]
        return EntitySize(
            largest=max(rows, default=0),
            total=sum(rows),
            partitions=topology.num_partitions[entity],
            dim=config.entity_dimension(entity),
            splittable=entity not in featurized,
        )

    used = sorted(topology.num_partitions)
    return RunSizes(
        num_partitions=max(topology.nparts_lhs, topology.nparts_rhs),
        two_sided=any(t in topology.lhs_types and t in topology.rhs_types for t in topology.partitioned_types),
        partitioned={t: size(t) for t in used if t in topology.partitioned_types},
        unpartitioned={t: size(t) for t in used if t not in topology.partitioned_types},
        model_bytes=model_bytes(config, num_dynamic_relations),
        chunk_edges=chunk_edges,
    )


def largest_chunk(
    sources: Sequence[EdgeSource], buckets: Sequence[Bucket], configured_chunks: int | None, max_edges_per_chunk: int
) -> int:
    """Edges of one chunk of the largest bucket over ``sources`` (each bucket's count read once).

    The chunk count follows the run's rule (:func:`~pbg_core.session.iterations.compute_num_edge_chunks`:
    from bucket (0, 0) of every edge path when not configured).
    """
    sizes = [[source.num_edges(bucket) for bucket in buckets] for source in sources]
    first = [per_source[0] for per_source in sizes if per_source]
    chunks = compute_num_edge_chunks(configured_chunks, first, max_edges_per_chunk)
    largest = max((n for per_source in sizes for n in per_source), default=0)
    return math.ceil(largest / chunks)
