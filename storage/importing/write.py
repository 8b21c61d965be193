"""Pass 2 of the import: spilled ids -> (partition, offset) -> one HDF5 file per bucket.

Each spill chunk is mapped with numpy lookups (id -> partition, id -> offset, per entity
type), edges of unknown relations or dropped entities are counted and removed, and the rest
are grouped by bucket with a stable sort (input order is kept inside a bucket).

Bucket sizes are counted first (a cheap extra read of the spill), so every dataset is
created with its exact final length, contiguous: a near-empty bucket file is a few KiB
(chunked, resizable datasets made HDF5 reserve a whole chunk per dataset), and writes are
plain slice assignments. The layout is PBG's (``lhs``, ``rhs``, ``rel`` int64, ``weight``
float32, ``format_version = 1``); files appear only when complete (:func:`storage.hdf5.open_write`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from pbg_core.types import Bucket
from storage import hdf5, layout
from storage.edge_lists.prefetch import prefetched
from storage.fs import urls
from storage.importing.count import ImportPlan, row_types
from storage.importing.partition import Assignment
from storage.importing.spill import Spill, SpillChunk

CHUNK_EDGES = 1 << 20  # spill edges mapped at a time


@dataclass(frozen=True)
class EdgeTarget:
    """Where the bucket files of one edge path go (no :class:`storage.edges.EdgeStore`: that
    module needs torch, which would cost the import path ~1.5 s and ~300 MB to load)."""

    url: str
    storage_options: Any = None

    def bucket_url(self, bucket: Bucket) -> str:
        """URL of the file of ``bucket`` (PBG's name)."""
        return urls.join_url(self.url, layout.edge_file(bucket.lhs, bucket.rhs))


@dataclass
class Mapped:
    """The kept edges of one spill chunk, with their bucket keys (``lhs_part * nparts_rhs + rhs_part``)."""

    bucket: np.ndarray
    lhs: np.ndarray
    rhs: np.ndarray
    rel: np.ndarray
    weight: np.ndarray | None
    unknown_relation: int
    unknown_entity: int


class ChunkMapper:
    """Maps spill chunks through the assignments of the entity types (and dynamic relations).

    The counting pass reads partitions only; the writing pass offsets too.

    Args:
        plan: The import plan.
        entities: Assignment per entity type.
        relations: Dynamic mode: the assignment of relation ids; None otherwise.
    """

    def __init__(self, plan: ImportPlan, entities: dict[str, Assignment], relations: Assignment | None) -> None:
        self.plan = plan
        self.entities = entities
        self.relation_index = None
        if relations is not None:
            self.relation_index = np.full(len(relations.part_of), -1, dtype=np.int32)
            self.relation_index[relations.order] = np.arange(len(relations.order))

    @property
    def num_buckets(self) -> int:
        return self.plan.nparts_lhs * self.plan.nparts_rhs

    def map(self, chunk: SpillChunk, offsets: bool = True) -> Mapped:
        """Kept edges of ``chunk`` as offsets, relation indices and bucket keys.

        With ``offsets=False`` only the bucket keys and the skip counts are computed (the
        ``lhs``/``rhs``/``rel``/``weight`` fields are then empty).
        """
        rel = chunk.rel if self.relation_index is None else self.relation_index[chunk.rel]
        known = rel >= 0
        parts: list[np.ndarray] = []
        offs: list[np.ndarray] = []  # stays empty with offsets=False (_locate gives None then)
        for side, ids in ((0, chunk.lhs), (1, chunk.rhs)):
            part, offset = self._locate(side, ids, rel, known, offsets)
            parts.append(part)
            if offset is not None:
                offs.append(offset)
        ok = (parts[0] >= 0) & (parts[1] >= 0)
        num_known = int(np.count_nonzero(known))
        num_ok = int(np.count_nonzero(ok))
        weight = chunk.weight
        if num_ok < len(ok):
            parts = [p[ok] for p in parts]
            if offsets:
                offs, rel = [o[ok] for o in offs], rel[ok]
                weight = None if weight is None else weight[ok]
        key = self._key_type
        bucket = parts[0].astype(key) * key(self.plan.nparts_rhs) + parts[1].astype(key)
        if not offsets:
            empty = np.empty(0, dtype=np.int64)
            return Mapped(bucket, empty, empty, empty, None, len(chunk) - num_known, num_known - num_ok)
        return Mapped(bucket, offs[0], offs[1], rel, weight, len(chunk) - num_known, num_known - num_ok)

    @property
    def _key_type(self) -> type[np.integer]:
        # Bucket keys as small as they fit: numpy's stable argsort is a radix sort for 16 bits.
        return np.uint16 if self.num_buckets <= 2**16 else np.int64

    def _locate(
        self, side: int, ids: np.ndarray, rel: np.ndarray, known: np.ndarray, offsets: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(partition or -1, offset) of every row's entity on ``side``."""
        types = row_types(self.plan, side, rel, known)
        if len(types) == 1 and bool(types[0][1].all()):  # one type, every relation known
            name = types[0][0]
            assignment = self.entities[name]
            return assignment.part_of[ids], (assignment.offset_of[ids] if offsets else None)
        part = np.full(len(rel), -1, dtype=np.int32)
        offset = np.zeros(len(rel), dtype=np.int32) if offsets else None
        for name, mask in types:
            sub = ids[mask]
            part[mask] = self.entities[name].part_of[sub]
            if offset is not None:
                offset[mask] = self.entities[name].offset_of[sub]
        return part, offset


def bucket_sizes(spill: Spill, mapper: ChunkMapper, chunk_edges: int = CHUNK_EDGES) -> tuple[np.ndarray, int, int]:
    """(edges per bucket key, unknown-relation skips, unknown-entity skips) of one input."""
    sizes = np.zeros(mapper.num_buckets, dtype=np.int64)
    unknown_relation = unknown_entity = 0
    keys_only = (mapper.map(chunk, offsets=False) for chunk in spill.chunks(chunk_edges))
    for mapped in prefetched(keys_only, name="pbg-import-map"):
        sizes += np.bincount(mapped.bucket, minlength=mapper.num_buckets)
        unknown_relation += mapped.unknown_relation
        unknown_entity += mapped.unknown_entity
    return sizes, unknown_relation, unknown_entity


@dataclass
class _Grouped:
    """The columns of one mapped chunk, sorted by bucket (input order kept inside a bucket)."""

    counts: np.ndarray  # edges per bucket key
    columns: dict[str, np.ndarray]
    num_edges: int


def _grouped(mapped: Mapped, num_buckets: int, num_edges: int) -> _Grouped:
    order = np.argsort(mapped.bucket, kind="stable")
    columns = {"lhs": mapped.lhs[order], "rhs": mapped.rhs[order], "rel": mapped.rel[order]}
    if mapped.weight is not None:
        columns["weight"] = mapped.weight[order]
    return _Grouped(np.bincount(mapped.bucket, minlength=num_buckets), columns, num_edges)


class _BucketFiles:
    """The open, pre-sized files of every bucket of one edge path, with a write cursor each."""

    def __init__(
        self, target: EdgeTarget, plan: ImportPlan, sizes: np.ndarray, weighted: bool, stack: ExitStack
    ) -> None:
        self.datasets: list[dict[str, h5py.Dataset]] = []
        self.cursor = np.zeros(len(sizes), dtype=np.int64)
        for key, size in enumerate(sizes.tolist()):
            bucket = Bucket(key // plan.nparts_rhs, key % plan.nparts_rhs)
            hf = stack.enter_context(hdf5.open_write(target.bucket_url(bucket), target.storage_options))
            columns = {name: hf.create_dataset(name, shape=(size,), dtype=np.int64) for name in ("lhs", "rhs", "rel")}
            if weighted:
                columns["weight"] = hf.create_dataset("weight", shape=(size,), dtype=np.float32)
            self.datasets.append(columns)

    def write(self, grouped: _Grouped) -> None:
        """Append the edges of ``grouped`` to their buckets (h5py converts to the int64 datasets)."""
        begin = 0
        for key in np.flatnonzero(grouped.counts).tolist():
            end = begin + int(grouped.counts[key])
            at = int(self.cursor[key])
            for name, values in grouped.columns.items():
                self.datasets[key][name][at : at + end - begin] = values[begin:end]
            self.cursor[key] = at + end - begin
            begin = end


def write_buckets(
    spills: Sequence[Spill],
    mapper: ChunkMapper,
    target: EdgeTarget,
    sizes: np.ndarray,
    weighted: bool,
    on_chunk: Callable[[int], None],
    chunk_edges: int = CHUNK_EDGES,
) -> int:
    """Write every bucket file of one edge path (all of the grid, empty ones too); edges written.

    ``spills``: the inputs written into this edge path, in order (one, unless ``--force`` gave
    several inputs one edge path); ``sizes``: their edges per bucket, summed. A background
    thread maps and sorts the next chunk (numpy, GIL released) while this one is written (h5py).
    """
    chunks = (chunk for spill in spills for chunk in spill.chunks(chunk_edges))
    grouped = (_grouped(mapper.map(chunk), mapper.num_buckets, len(chunk)) for chunk in chunks)
    with ExitStack() as stack:
        files = _BucketFiles(target, mapper.plan, sizes, weighted, stack)
        for group in prefetched(grouped, name="pbg-import-map"):
            files.write(group)
            on_chunk(group.num_edges)
        if not np.array_equal(files.cursor, sizes):
            raise RuntimeError(f"bucket sizes changed between the passes: counted {sizes}, wrote {files.cursor}")
    return int(sizes.sum())
