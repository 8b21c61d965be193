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

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from pbg_core.types import Bucket
from storage import fs, hdf5, layout
from storage.import_count import ImportPlan, row_types
from storage.import_partition import Assignment
from storage.import_spill import Spill, SpillChunk

CHUNK_EDGES = 1 << 20  # spill edges mapped at a time


@dataclass(frozen=True)
class EdgeTarget:
    """Where the bucket files of one edge path go (no :class:`storage.edges.EdgeStore`: that
    module needs torch, which would cost the import path ~1.5 s and ~300 MB to load)."""

    url: str
    storage_options: Any = None

    def bucket_url(self, bucket: Bucket) -> str:
        """URL of the file of ``bucket`` (PBG's name)."""
        return fs.join_url(self.url, layout.edge_file(bucket.lhs, bucket.rhs))


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
            self.relation_index = np.full(len(relations.part_of), -1, dtype=np.int64)
            self.relation_index[relations.order] = np.arange(len(relations.order))

    @property
    def num_buckets(self) -> int:
        return self.plan.nparts_lhs * self.plan.nparts_rhs

    def map(self, chunk: SpillChunk) -> Mapped:
        """Kept edges of ``chunk`` as offsets, relation indices and bucket keys."""
        rel = chunk.rel.astype(np.int64)
        if self.relation_index is not None:
            rel = self.relation_index[rel]
        known = rel >= 0
        parts, offsets = [], []
        for side, ids in ((0, chunk.lhs), (1, chunk.rhs)):
            part = np.full(len(rel), -1, dtype=np.int64)
            offset = np.zeros(len(rel), dtype=np.int64)
            for name, mask in row_types(self.plan, side, rel, known):
                assignment = self.entities[name]
                if mask.all():
                    part, offset = assignment.part_of[ids].astype(np.int64), assignment.offset_of[ids]
                else:
                    sub = ids[mask]
                    part[mask], offset[mask] = assignment.part_of[sub], assignment.offset_of[sub]
            parts.append(part)
            offsets.append(offset)
        ok = (parts[0] >= 0) & (parts[1] >= 0)
        num_known = int(known.sum())
        unknown_entity = num_known - int(ok.sum())
        weight = chunk.weight
        if not ok.all():
            parts, offsets = [p[ok] for p in parts], [o[ok] for o in offsets]
            rel = rel[ok]
            weight = None if weight is None else weight[ok]
        bucket = parts[0] * self.plan.nparts_rhs + parts[1]
        return Mapped(bucket, offsets[0], offsets[1], rel, weight, len(chunk) - num_known, unknown_entity)


def bucket_sizes(spill: Spill, mapper: ChunkMapper, chunk_edges: int = CHUNK_EDGES) -> tuple[np.ndarray, int, int]:
    """(edges per bucket key, unknown-relation skips, unknown-entity skips) of one input."""
    sizes = np.zeros(mapper.num_buckets, dtype=np.int64)
    unknown_relation = unknown_entity = 0
    for chunk in spill.chunks(chunk_edges):
        mapped = mapper.map(chunk)
        sizes += np.bincount(mapped.bucket, minlength=mapper.num_buckets)
        unknown_relation += mapped.unknown_relation
        unknown_entity += mapped.unknown_entity
    return sizes, unknown_relation, unknown_entity


class _BucketFiles:
    """The open, pre-sized files of every bucket of one edge path, with a write cursor each."""

    def __init__(self, target: EdgeTarget, plan: ImportPlan, sizes: np.ndarray, weighted: bool, stack: ExitStack) -> None:
        self.datasets: list[dict[str, h5py.Dataset]] = []
        self.cursor = np.zeros(len(sizes), dtype=np.int64)
        for key, size in enumerate(sizes.tolist()):
            bucket = Bucket(key // plan.nparts_rhs, key % plan.nparts_rhs)
            hf = stack.enter_context(hdf5.open_write(target.bucket_url(bucket), target.storage_options))
            columns = {name: hf.create_dataset(name, shape=(size,), dtype=np.int64) for name in ("lhs", "rhs", "rel")}
            if weighted:
                columns["weight"] = hf.create_dataset("weight", shape=(size,), dtype=np.float32)
            self.datasets.append(columns)

    def write(self, mapped: Mapped) -> None:
        """Append the edges of ``mapped`` to their buckets, keeping their order."""
        if len(mapped.bucket) == 0:
            return
        order = np.argsort(mapped.bucket, kind="stable")
        counts = np.bincount(mapped.bucket, minlength=len(self.datasets))
        columns = {"lhs": mapped.lhs[order], "rhs": mapped.rhs[order], "rel": mapped.rel[order]}
        if mapped.weight is not None:
            columns["weight"] = mapped.weight[order]
        begin = 0
        for key in np.flatnonzero(counts).tolist():
            end = begin + int(counts[key])
            at = int(self.cursor[key])
            for name, values in columns.items():
                self.datasets[key][name][at : at + end - begin] = values[begin:end]
            self.cursor[key] = at + end - begin
            begin = end


def write_buckets(
    spill: Spill, mapper: ChunkMapper, target: EdgeTarget, sizes: np.ndarray, weighted: bool,
    on_chunk: Callable[[int], None], chunk_edges: int = CHUNK_EDGES,
) -> int:
    """Write every bucket file of one edge path (all of the grid, empty ones too); edges written."""
    with ExitStack() as stack:
        files = _BucketFiles(target, mapper.plan, sizes, weighted, stack)
        for chunk in spill.chunks(chunk_edges):
            files.write(mapper.map(chunk))
            on_chunk(len(chunk))
        if not np.array_equal(files.cursor, sizes):
            raise RuntimeError(f"bucket sizes changed between the passes: counted {sizes}, wrote {files.cursor}")
    return int(sizes.sum())
