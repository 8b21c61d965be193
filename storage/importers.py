"""TSV edge-list importer: text edge lists -> PBG entity files and bucketed edge files.

Behaviour of PBG's ``import_from_tsv`` (reference 1.19), with its weak points fixed:

- **Validate first** (rows read by :mod:`storage.tsv`). One counting pass reads every input
  before anything is written; a malformed line (too few columns, non-numeric or non-finite
  weight) or an empty file raises :class:`BadDataError` naming ``file:line`` and what was
  expected. Blank lines are skipped and counted (PBG crashes on them).
- **Seeded.** Relation names (dynamic mode) and entity names are shuffled with one numpy
  ``Generator`` built from ``seed``: relations first, then entity types in sorted order.
- **Partitions.** The shuffled names of a type with ``P`` partitions and ``N`` names are split
  into contiguous ranges: partition ``p`` starts at ``ceil(p*N/P)`` and name ``i`` belongs to
  partition ``floor(i*P/N)``. PBG evaluates the same formulas in floating point, which can
  round the wrong way (e.g. N=11, P=55) and trip its own assertion; we use exact integers.
- **Streaming.** Memory holds the name dictionaries plus per-bucket buffers of at most
  ``FLUSH_EDGES`` edges, never a whole edge list.
- **Complete grid.** Every ``edges_{l}_{r}.h5`` of every edge path exists at the end, even
  if empty, because training expects the full bucket grid.
- **Atomic output** (:mod:`storage.staging`). Everything is written under hidden
  ``.pbg-import-*`` staging directories inside the output directories, then moved into
  place (edge files first, entity files last). On any failure every file this import
  created (staged or already moved) is removed. A failure in the final moves can therefore
  also remove files an older import had left at the same names: the output is then absent
  rather than a mix of two imports.
- **Weights** are float32 (PBG truncated them to int64).

An edge whose relation is unknown (non-dynamic: not a config relation name; dynamic: filtered
out by ``relation_type_min_count``) or whose entity was filtered out is skipped and counted.
Entities are counted over *all* inputs (PBG): in dynamic mode also on edges whose relation is
later filtered out. Every entity type of the config gets count/name files (count 0 if unused).
"""

from __future__ import annotations

import logging
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from pbg_core.edgelist import EdgeList
from pbg_core.errors import ConfigError
from pbg_core.types import Bucket, EntityName, Partition
from storage import fs
from storage.edges import EdgeStore
from storage.entities import EntityStore
from storage.errors import DataNotFound
from storage.staging import Staging
from storage.tsv import Columns, Row, read_rows

logger = logging.getLogger(__name__)

FLUSH_EDGES = 100_000  # edges buffered per bucket before they are appended to its file
PROGRESS_EVERY = 1_000_000  # lines between two progress callbacks

ProgressFn = Callable[[str, int], None]


def _skip_reasons() -> dict[str, int]:
    return {"unknown_relation": 0, "unknown_entity": 0, "blank_line": 0}


@dataclass
class ImportReport:
    """What one import did.

    Attributes:
        edges_read: Non-blank lines read in the writing pass, over all inputs.
        edges_written: Edges written, per input (input i -> edge path i).
        skipped: Lines not written, by reason: ``unknown_relation``, ``unknown_entity``,
            ``blank_line``.
        entity_counts: Entities kept per entity type (after ``entity_min_count``).
        relation_count: Relation types (config relations, or dynamic relations kept).
        seconds: Wall time of the whole import.
    """

    edges_read: int = 0
    edges_written: list[int] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=_skip_reasons)
    entity_counts: dict[EntityName, int] = field(default_factory=dict)
    relation_count: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        written = sum(self.edges_written)
        rate = self.edges_read / self.seconds if self.seconds > 0 else 0.0
        skipped = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in self.skipped.items() if n)
        entities = ", ".join(f"{name}: {n:,}" for name, n in sorted(self.entity_counts.items()))
        return (
            f"imported {written:,} of {self.edges_read:,} edges in {self.seconds:.1f} s ({rate:,.0f} edges/s); "
            f"per input {', '.join(f'{n:,}' for n in self.edges_written)}; "
            f"skipped {skipped or 'none'}; entities {entities}; {self.relation_count} relation type(s)"
        )


class _Progress:
    """Counts lines of one phase and reports every ``PROGRESS_EVERY`` lines and at the end."""

    def __init__(self, callback: ProgressFn | None, phase: str) -> None:
        self.callback = callback
        self.phase = phase
        self.lines = 0
        self.next_report = PROGRESS_EVERY

    def advance(self, lines: int) -> None:
        """Count ``lines`` more lines (cheap enough to call once per line)."""
        self.lines += lines
        if self.lines >= self.next_report:
            self.next_report += PROGRESS_EVERY
            if self.callback is not None:
                self.callback(self.phase, self.lines)

    def done(self) -> None:
        if self.callback is not None:
            self.callback(self.phase, self.lines)


@dataclass(frozen=True)
class _Plan:
    """Everything the passes need, derived once from the config and arguments."""

    columns: Columns
    delimiter: str | None
    dynamic: bool
    sides: list[tuple[EntityName, EntityName]]  # (lhs type, rhs type) per config relation
    num_partitions: dict[EntityName, int]
    nparts_lhs: int
    nparts_rhs: int
    storage_options: Any = None

    def buckets(self) -> list[Bucket]:
        return [Bucket(l, r) for l in range(self.nparts_lhs) for r in range(self.nparts_rhs)]


class EntityIndex:
    """The shuffled names of one entity type, split into contiguous partitions (PBG's Dictionary).

    Args:
        names: Names in their final (shuffled) order.
        num_partitions: ``P`` >= 1.
    """

    def __init__(self, names: list[str], num_partitions: int) -> None:
        self.names = names
        self.num_partitions = num_partitions
        self._index = {name: i for i, name in enumerate(names)}
        size = len(names)
        # Exact ceil(p * N / P); start of partition P is N.
        self._starts = [-(-p * size // num_partitions) for p in range(num_partitions + 1)]

    def locate(self, name: str) -> tuple[Partition, int] | None:
        """(partition, offset) of ``name``, or None if unknown."""
        i = self._index.get(name)
        if i is None:
            return None
        part = i * self.num_partitions // len(self.names)
        return part, i - self._starts[part]

    def part_names(self, part: Partition) -> list[str]:
        """Names of ``part`` ordered by offset."""
        return self.names[self._starts[part] : self._starts[part + 1]]


def _read_rows(url: str, plan: _Plan, progress: _Progress) -> Iterator[Row | None]:
    """The rows of the edge list at ``url`` (see :func:`storage.tsv.read_rows`), counted by ``progress``."""
    return read_rows(url, plan.columns, plan.delimiter, progress.advance, plan.storage_options)


def _make_plan(config: Any, inputs: Sequence[str], columns: Columns, delimiter: str | None) -> _Plan:
    """Check the arguments against the config and derive the plan (no I/O except exists)."""
    if len(inputs) != len(config.edge_paths):
        raise ValueError(
            f"got {len(inputs)} input(s) {list(inputs)} but config.edge_paths has "
            f"{len(config.edge_paths)} {list(config.edge_paths)}: input i is imported into edge path i"
        )
    for name, col in zip(columns._fields, columns):
        if col is not None and col < 0:
            raise ValueError(f"{name}_col must be a 0-based column index >= 0, got {col}")
    if delimiter == "":
        raise ValueError("delimiter must be None (any whitespace) or a non-empty string, got ''")
    dynamic = bool(config.dynamic_relations)
    if dynamic and len(config.relations) != 1:
        raise ConfigError([f"relations: dynamic_relations needs exactly 1 relation, got {len(config.relations)}"])
    if dynamic and columns.rel is None:
        raise ValueError("rel_col is required with dynamic_relations (relation names come from the data)")
    sides = [(rel.lhs, rel.rhs) for rel in config.relations]
    unknown = sorted({t for pair in sides for t in pair} - set(config.entities))
    if unknown:
        raise ConfigError([f"relations: entity types {unknown} are not in entities {sorted(config.entities)}"])
    options = config.storage_options_for_fs()  # type: ignore[attr-defined]  # the real credentials
    for url in inputs:
        if not fs.exists(url, options):
            raise DataNotFound(url, "input edge list does not exist")
    parts = {name: entity.num_partitions for name, entity in config.entities.items()}
    return _Plan(
        columns=columns,
        delimiter=delimiter,
        dynamic=dynamic,
        sides=sides,
        num_partitions=parts,
        nparts_lhs=max(parts[lhs] for lhs, _ in sides),
        nparts_rhs=max(parts[rhs] for _, rhs in sides),
        storage_options=options,
    )


def _count_inputs(
    inputs: Sequence[str], plan: _Plan, relation_ids: dict[str, int], progress: _Progress
) -> tuple[Counter[str], dict[EntityName, Counter[str]]]:
    """Validating pass: relation name counts (dynamic mode) and entity counts per type."""
    relations: Counter[str] = Counter()
    entities: dict[EntityName, Counter[str]] = {name: Counter() for name in plan.num_partitions}
    for url in inputs:
        for row in _read_rows(url, plan, progress):
            if row is None:
                continue
            lhs, rhs, rel, _ = row
            if plan.dynamic:
                relations[rel] += 1  # type: ignore[index]  # rel_col is required in dynamic mode
                rel_id: int | None = 0
            else:
                rel_id = 0 if rel is None else relation_ids.get(rel)
                if rel_id is None:
                    continue  # skipped (and counted) in the writing pass
            lhs_type, rhs_type = plan.sides[rel_id]
            entities[lhs_type][lhs] += 1
            entities[rhs_type][rhs] += 1
    progress.done()
    return relations, entities


def _shuffled(counts: Counter[str], min_count: int, rng: np.random.Generator) -> list[str]:
    """Names seen at least ``min_count`` times, in first-seen order permuted by ``rng``."""
    names = [name for name, count in counts.items() if count >= min_count]
    return [names[i] for i in rng.permutation(len(names))]


class _BucketBuffers:
    """Per-bucket edge buffers of one edge path; a full buffer is appended to the bucket's file.

    Appenders are opened lazily (registered on ``stack``, so they commit on a clean exit
    and are discarded on error).
    """

    def __init__(self, store: EdgeStore, stack: ExitStack, weighted: bool) -> None:
        self.store = store
        self.stack = stack
        self.weighted = weighted
        self.appenders: dict[tuple[int, int], Any] = {}
        self.buffers: dict[tuple[int, int], tuple[array, array, array, array]] = {}
        self.written = 0

    def add(self, bucket: tuple[int, int], lhs: int, rhs: int, rel: int, weight: float) -> None:
        """Buffer one edge of ``bucket`` (a plain tuple: cheaper than a Bucket per edge)."""
        buffer = self.buffers.get(bucket)
        if buffer is None:
            # Our buffer is the only one: the appender writes each flushed block straight away.
            appender = self.store.appender(Bucket(*bucket), buffer_edges=1)
            self.appenders[bucket] = self.stack.enter_context(appender)
            buffer = self.buffers[bucket] = (array("q"), array("q"), array("q"), array("f"))
        buffer[0].append(lhs)
        buffer[1].append(rhs)
        buffer[2].append(rel)
        if self.weighted:
            buffer[3].append(weight)
        if len(buffer[0]) >= FLUSH_EDGES:
            self.flush(bucket)

    def flush(self, bucket: tuple[int, int]) -> None:
        lhs, rhs, rel, weight = self.buffers[bucket]
        if len(lhs) == 0:
            return
        edges = _edge_list(lhs, rhs, rel, weight if self.weighted else None)
        self.appenders[bucket].append(edges)
        self.written += len(edges)
        for column in (lhs, rhs, rel, weight):
            del column[:]

    def flush_all(self) -> None:
        for bucket in self.buffers:
            self.flush(bucket)


def _edge_list(lhs: array, rhs: array, rel: array, weight: array | None) -> EdgeList:
    def longs(values: array) -> torch.Tensor:
        return torch.from_numpy(np.frombuffer(values, dtype=np.int64).copy())

    weights = None if weight is None else torch.from_numpy(np.frombuffer(weight, dtype=np.float32).copy())
    return EdgeList.from_tensors(longs(lhs), longs(rhs), longs(rel), weight=weights)


def _write_edge_path(
    url: str,
    store: EdgeStore,
    plan: _Plan,
    relation_ids: dict[str, int],
    entities: dict[EntityName, EntityIndex],
    report: ImportReport,
    progress: _Progress,
) -> int:
    """Writing pass over one input; returns the number of edges written to ``store``."""
    skipped = report.skipped
    with ExitStack() as stack:
        buffers = _BucketBuffers(store, stack, weighted=plan.columns.weight is not None)
        for row in _read_rows(url, plan, progress):
            if row is None:
                skipped["blank_line"] += 1
                continue
            report.edges_read += 1
            lhs, rhs, rel, weight = row
            rel_id = 0 if rel is None else relation_ids.get(rel)
            if rel_id is None:
                skipped["unknown_relation"] += 1
                continue
            lhs_type, rhs_type = plan.sides[0 if plan.dynamic else rel_id]
            lhs_at = entities[lhs_type].locate(lhs)
            rhs_at = entities[rhs_type].locate(rhs)
            if lhs_at is None or rhs_at is None:
                skipped["unknown_entity"] += 1
                continue
            buffers.add((lhs_at[0], rhs_at[0]), lhs_at[1], rhs_at[1], rel_id, weight)
        buffers.flush_all()
    empty = array("q")
    for bucket in plan.buckets():
        if bucket not in buffers.appenders:
            store.save(bucket, _edge_list(empty, empty, empty, array("f") if buffers.weighted else None))
    return buffers.written


def _write_entity_files(
    store: EntityStore, entities: dict[EntityName, EntityIndex], relation_names: list[str], dynamic: bool
) -> None:
    for name, index in entities.items():
        for part in range(index.num_partitions):
            part_names = index.part_names(part)
            store.save_count(name, part, len(part_names))
            store.save_names(name, part, part_names)
    if dynamic:
        store.save_dynamic_relation_count(len(relation_names))
    # Always written, also in standard mode (PBG fix #212): export checks names against it.
    store.save_dynamic_relation_names(relation_names)


def import_edges(
    config: Any,
    inputs: list[str],
    *,
    lhs_col: int,
    rhs_col: int,
    rel_col: int | None = None,
    weight_col: int | None = None,
    relation_type_min_count: int = 1,
    entity_min_count: int = 1,
    delimiter: str | None = None,
    seed: int | None = None,
    progress: ProgressFn | None = None,
) -> ImportReport:
    """Import TSV edge lists into ``config.entity_path`` and ``config.edge_paths`` (PBG layout).

    Args:
        config: The training config (``ConfigSchema``); reads entity_path, edge_paths,
            entities, relations and dynamic_relations.
        inputs: Edge-list files or URLs; input i is written to ``config.edge_paths[i]``.
        lhs_col: 0-based column of the source entity name.
        rhs_col: 0-based column of the target entity name.
        rel_col: 0-based column of the relation name; None means relation 0 (not allowed in
            dynamic mode).
        weight_col: 0-based column of a float edge weight; None writes no weights.
        relation_type_min_count: Dynamic mode: drop relation names seen fewer times.
        entity_min_count: Drop entities seen fewer times (per type, over all inputs).
        delimiter: Column separator; None splits on any run of whitespace like PBG.
        seed: Seed of the shuffles; None draws fresh entropy.
        progress: Called as ``progress(phase, lines_done)`` every ``PROGRESS_EVERY`` lines
            and at the end of each phase (``"counting"``, then ``"writing"``).

    Returns:
        An :class:`ImportReport`.

    Raises:
        ValueError: Bad arguments (input count, column index, delimiter, missing rel_col).
        ConfigError: Dynamic mode without exactly one relation, or unknown entity types.
        DataNotFound: An input does not exist.
        BadDataError: A malformed line or an empty input (raised before anything is written).
    """
    started = time.monotonic()
    plan = _make_plan(config, inputs, Columns(lhs_col, rhs_col, rel_col, weight_col), delimiter)
    config_relation_ids = {rel.name: i for i, rel in enumerate(config.relations)}
    relation_counts, entity_counts = _count_inputs(inputs, plan, config_relation_ids, _Progress(progress, "counting"))
    rng = np.random.default_rng(seed)
    if plan.dynamic:
        relation_names = _shuffled(relation_counts, relation_type_min_count, rng)
    else:
        relation_names = [rel.name for rel in config.relations]
    relation_ids = {name: i for i, name in enumerate(relation_names)}
    entities = {
        name: EntityIndex(_shuffled(entity_counts.pop(name), entity_min_count, rng), plan.num_partitions[name])
        for name in sorted(plan.num_partitions)
    }
    report = ImportReport(
        entity_counts={name: len(index.names) for name, index in entities.items()},
        relation_count=len(relation_names),
    )
    staging = Staging(plan.storage_options)
    writing = _Progress(progress, "writing")
    try:
        for url, edge_path in zip(inputs, config.edge_paths):
            store = EdgeStore(staging.stage(edge_path), plan.storage_options)
            written = _write_edge_path(url, store, plan, relation_ids, entities, report, writing)
            report.edges_written.append(written)
            logger.info("imported %d edges from %s into %s", written, url, edge_path)
        entity_store = EntityStore(staging.stage(config.entity_path), plan.storage_options)
        _write_entity_files(entity_store, entities, relation_names, plan.dynamic)
        staging.commit()
    except BaseException:
        staging.rollback()
        raise
    writing.done()
    report.seconds = time.monotonic() - started
    logger.info("import done: %s", report)
    return report
