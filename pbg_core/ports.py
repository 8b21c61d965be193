"""What the engine needs from storage, as Protocols (storage implements them).

The engine never imports storage: tasks open the stores and hand them to the
engine, which only sees these shapes. All methods speak tensors and versions.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from pbg_core.edgelist import EdgeList
from pbg_core.types import Bucket, EntityName, Partition, PartitionKey


@dataclass(frozen=True)
class NamesDigests:
    """Which names a checkpoint's rows belong to: a digest of each names list (docs/formats.md).

    ``entities``: (type, partition) -> digest of its ``entity_names`` file (keys without one are
    left out); ``relations``: digest of ``dynamic_rel_names.json`` in dynamic mode, else None.
    """

    entities: Mapping[PartitionKey, str] = field(default_factory=dict)
    relations: str | None = None


@dataclass(frozen=True)
class CheckpointMetadata:
    """Attributes written on every checkpoint file (PBG: ``config/json``, ``iteration/*``; ours: the names digest)."""

    config_json: str
    iteration: dict[str, int | str] = field(default_factory=dict)
    names: NamesDigests = field(default_factory=NamesDigests)


@dataclass(frozen=True)
class VersionLayout:
    """What a complete checkpoint version holds besides its model file.

    Attributes:
        embeddings: (rows, dimension) of the embeddings of every (entity type, partition) of
            the config: every partition of a partitioned type, partition 0 of the others (a
            featurized type's rows are its features); None where any shape will do (a reader
            that checks the rows itself).
    """

    embeddings: Mapping[PartitionKey, tuple[int, int] | None]

    @classmethod
    def of(cls, counts: Mapping[PartitionKey, int], dims: Mapping[EntityName, int]) -> VersionLayout:
        """The layout of entity ``counts`` per (entity type, partition) and ``dims`` per entity type."""
        return cls({key: (count, dims[key[0]]) for key, count in sorted(counts.items())})


@dataclass(frozen=True)
class CompleteVersion:
    """Evidence that ``version`` of the checkpoint directory ``url`` was found complete.

    Made only by a store's ``check_complete``. Every method that deletes checkpoint files (older
    versions, bucket progress) or copies a version takes one for the version it keeps, so nothing
    is deleted before what is kept is known complete (docs/checkpoint-protocol.md, "Deleting").
    """

    url: str
    version: int


class EdgeSource(Protocol):
    """Bucketed edges of one edge path."""

    def num_edges(self, bucket: Bucket) -> int:
        """Edges stored in ``bucket``."""
        ...

    def load_chunk(self, bucket: Bucket, chunk_idx: int, num_chunks: int, shared: bool = False) -> EdgeList:
        """Chunk ``chunk_idx`` of ``num_chunks`` of the bucket (PBG's contiguous split).

        ``shared=True`` asks for tensors in shared memory (read there directly).
        """
        ...

    def stamp(self, bucket: Bucket) -> Hashable | None:
        """A cheap identity of the bucket's stored content that changes when it is replaced.

        Equal stamps let the engine keep a chunk it loaded before instead of reading it
        again; None means "unknown: read it again".
        """
        ...


class PartitionStore(Protocol):
    """Versioned embeddings, model and optimizer state (a checkpoint directory)."""

    def read_version(self) -> int:
        """The committed version (0 when nothing is committed)."""
        ...

    def has_embeddings(self, entity: EntityName, part: Partition, version: int) -> bool:
        """Whether embeddings of (entity, part) exist at ``version``."""
        ...

    def load_embeddings(
        self, entity: EntityName, part: Partition, version: int, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, bytes | None]:
        """Embeddings (into ``out`` when given) and serialized optimizer state."""
        ...

    def embeddings_shape(self, entity: EntityName, part: Partition, version: int) -> tuple[int, int]:
        """(count, dim) of the stored embeddings of (entity, part) at ``version``."""
        ...

    def save_embeddings(
        self,
        entity: EntityName,
        part: Partition,
        version: int,
        embeddings: torch.Tensor,
        optim_state: bytes | None,
        metadata: CheckpointMetadata,
    ) -> None:
        """Write embeddings of (entity, part) as ``version``."""
        ...

    def has_model(self, version: int) -> bool:
        """Whether the model file of ``version`` exists."""
        ...

    def load_model(self, version: int) -> tuple[dict[str, torch.Tensor], bytes | None]:
        """Model state dict (private keys) and serialized optimizer state."""
        ...

    def save_model(
        self,
        version: int,
        state_dict: Mapping[str, torch.Tensor],
        public_names: Mapping[str, str],
        optim_state: bytes | None,
        metadata: CheckpointMetadata,
    ) -> None:
        """Write the model of ``version``."""
        ...


class NewRowSource(Protocol):
    """Initial vectors of rows an ``init_path`` checkpoint lacks (``init_new_entities: neighbor_mean``)."""

    def load_new_rows(
        self, entity: EntityName, part: Partition
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
        """(row offsets, vectors, Adagrad sums or None) for (entity, part), or None when none were prepared."""
        ...


class VersionedStore(PartitionStore, Protocol):
    """A checkpoint directory the engine also commits, snapshots and prunes."""

    url: str  # where it lives (for messages, and the run's lease next to it)

    def write_version(self, version: int) -> None:
        """Atomically point the checkpoint at ``version`` (the commit point)."""
        ...

    def check_complete(self, version: int, expected: VersionLayout) -> CompleteVersion:
        """Evidence that every file of ``version`` is there, readable and shaped as ``expected`` says.

        Version 0 (nothing committed) is complete by definition. Raises naming what is missing.
        """
        ...

    def preserve_version(self, kept: CompleteVersion, epoch: int) -> None:
        """Keep a self-contained snapshot of the complete version ``kept`` as ``epoch_{epoch}``."""
        ...

    def remove_versions_before(self, kept: CompleteVersion) -> list[int]:
        """Delete every version older than the complete version ``kept`` except 0 (idempotent); those removed."""
        ...


class StatsSink(Protocol):
    """Where per-bucket stats rows go (keyed by their ``index``: rewriting replaces)."""

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Store ``rows``, replacing rows with the same index."""
        ...


# Where a saved partition or model of the open version is: the progress area of the
# bucket at that position of the pass, or (FINAL) the version's own file names.
FINAL = -1


@dataclass
class PassProgress:
    """Durable progress of the open version ``version``: what a resumed run starts from.

    Attributes:
        version: The open (uncommitted) version these saves belong to.
        iteration_index: The iteration (pass) being trained.
        order: The pass's full bucket order.
        done: How many buckets of ``order`` are trained and saved.
        partitions: (entity, part) -> where its latest state of this pass is
            (a bucket position's progress area, or :data:`FINAL`).
        model: Where the model's latest state is, or None if not saved in this pass.
        rows: Stats rows of the done buckets.
    """

    version: int
    iteration_index: int
    order: list[Bucket]
    done: int = 0
    partitions: dict[PartitionKey, int] = field(default_factory=dict)
    model: int | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)


class ProgressStore(Protocol):
    """The progress area of a checkpoint directory (bucket-level saves of the open version)."""

    def area(self, version: int, position: int) -> PartitionStore:
        """Where bucket ``position`` of the pass writing ``version`` saves its partitions
        and model (the version's own files for :data:`FINAL`)."""
        ...

    def read(self, version: int) -> PassProgress | None:
        """The recorded progress of ``version``, or None."""
        ...

    def write(self, progress: PassProgress) -> None:
        """Atomically replace the recorded progress (the commit point of a bucket)."""
        ...

    def promote(self, version: int, position: int, entity: EntityName | None, part: Partition) -> None:
        """Copy a partition's (``entity``) or the model's (None) file from a progress area to
        the version's own name."""
        ...

    def prune(self, version: int, keep: set[int]) -> None:
        """Delete the progress areas of ``version`` whose position is not in ``keep``."""
        ...

    def clear(self, committed: CompleteVersion, keep_open: bool = False) -> None:
        """Delete every progress record and area (after a commit, or when stale), except those
        of the open version ``committed.version + 1`` when ``keep_open``. ``committed``: the
        committed version, found complete (no saved progress is deleted while it is not)."""
        ...

    def close(self) -> None:
        """Finish writes still in flight (end of the session)."""
        ...
