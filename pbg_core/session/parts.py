"""Small collaborators of the training session: settings, model state, slicing.

:class:`SessionSettings` holds the flat values the session needs (never the
whole config) plus the partition topology; :class:`ModelState` owns the shared
model (operators, global embeddings) and its Adagrad state and knows how to
restore and save them through a :class:`~pbg_core.ports.PartitionStore`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from pbg_core.errors import PbgError, ShapeError
from pbg_core.model.embedder import MultiRelationEmbedder
from pbg_core.model.param_names import model_public_names
from pbg_core.parallel.memory import SlotMap
from pbg_core.ports import CheckpointMetadata, NamesDigests, PartitionStore
from pbg_core.session.partitions import PartitionTopology
from pbg_core.session.residency import PartitionResidency
from pbg_core.training.optimizers import AsyncAdagrad, state_from_bytes, state_to_bytes
from pbg_core.types import Bucket, EntityName, Partition, PartitionKey, Side, SideKey


@dataclass(frozen=True)
class SessionSettings:
    """Flat run settings plus the partition topology."""

    topology: PartitionTopology
    bucket_order: str
    eval_fraction: float
    checkpoint_preservation_interval: int | None
    relation_sides: tuple[tuple[str, str], ...] = ()
    featurized: frozenset[str] = frozenset()
    batch_size: int = 1000
    resident: Mapping[EntityName, int] = field(default_factory=dict)  # partitions kept in memory, per type
    progress_interval: float = 0.0  # seconds between save points (see pbg_core.session.save_points)

    @property
    def nparts_lhs(self) -> int:
        """Rows of the bucket grid."""
        return self.topology.nparts_lhs

    @property
    def nparts_rhs(self) -> int:
        """Columns of the bucket grid."""
        return self.topology.nparts_rhs

    def buckets(self) -> list[Bucket]:
        """Every bucket, lexicographically (offline evaluation's order)."""
        return self.topology.buckets()

    def bucket_partitions(self, bucket: Bucket) -> list[PartitionKey]:
        """Partitioned (entity, partition) pairs ``bucket`` needs in memory."""
        return self.topology.bucket_partitions(bucket)

    def partitioned_keys(self) -> list[PartitionKey]:
        """Every partitioned (entity, partition) pair."""
        return self.topology.partitioned_keys()

    def unpartitioned_keys(self) -> list[PartitionKey]:
        """(entity, 0) for every unpartitioned entity type (resident the whole run)."""
        return self.topology.unpartitioned_keys()

    def partition_of(self, bucket: Bucket) -> dict[SideKey, Partition]:
        """Partition read for each (entity type, side) in ``bucket``."""
        return {(entity, side): part for side in Side for entity, part in self.topology.side_partitions(bucket, side)}

    def slot_map(self, bucket: Bucket, residency: PartitionResidency) -> SlotMap:
        """Where each (entity type, side) of ``bucket`` lives in the shared pool."""
        return {
            (entity, side): residency.handle((entity, part)).ref
            for side in Side
            for entity, part in self.topology.side_partitions(bucket, side)
        }


class MetadataSource:
    """Builds the attributes written on checkpoint files for the open iteration.

    ``names``: which names the run's rows belong to (the entity files it reads), recorded on
    every file it writes.
    """

    def __init__(self, config_json: str, names: NamesDigests | None = None) -> None:
        self.config_json = config_json
        self.names = names or NamesDigests()
        self.iteration: dict[str, int | str] = {}

    def __call__(self) -> CheckpointMetadata:
        return CheckpointMetadata(config_json=self.config_json, iteration=dict(self.iteration), names=self.names)


@dataclass
class ModelState:
    """The shared model and its Adagrad accumulators; the only writer of model files."""

    model: MultiRelationEmbedder
    optimizer: AsyncAdagrad | None
    dirty: bool = False
    source: str = field(default="fresh")

    def restore(self, store: PartitionStore, version: int, init_store: PartitionStore | None) -> str:
        """Load from ``version`` of ``store``, else from ``init_store``, else keep the fresh init."""
        candidates = [(store, version, f"version {version}")] if version > 0 else []
        if init_store is not None:
            init_version = init_store.read_version()
            candidates.append((init_store, init_version, f"init_path version {init_version}"))
        for candidate, candidate_version, label in candidates:
            if candidate.has_model(candidate_version):
                state_dict, optim = candidate.load_model(candidate_version)
                # init_path may come from before an append added dynamic relation types.
                self._load(state_dict, optim, label, grows=candidate is init_store)
                self.source = label
                return label
        return self.source

    def restore_saved(self, store: PartitionStore, version: int) -> None:
        """Load the model an interrupted pass saved (it must be there)."""
        if not store.has_model(version):
            raise PbgError(
                f"the recorded progress of version {version} names a model file that is missing; "
                "the progress area was changed from outside"
            )
        state_dict, optim = store.load_model(version)
        self._load(state_dict, optim, f"progress of version {version}")
        self.dirty = False

    def nbytes(self) -> int:
        """Bytes of the model's parameters (about what a save writes, its optimizer state aside)."""
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def save(self, store: Any, version: int, metadata: CheckpointMetadata) -> None:
        """Write the model file of ``version`` (parameters under PBG's public names)."""
        state_dict = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        optim = state_to_bytes(self.optimizer.optimizer_state_dict()) if self.optimizer is not None else None
        store.save_model(version, state_dict, model_public_names(state_dict), optim, metadata)
        self.dirty = False

    def _load(self, state_dict: dict[str, torch.Tensor], optim: bytes | None, label: str, grows: bool = False) -> None:
        """Copy a stored model (and its Adagrad sums) into this one.

        ``grows``: a stored parameter may have fewer rows than this model's (dynamic relation types
        appended since): it fills the first rows, the others keep a fresh model's values.
        """
        own = self.model.state_dict()
        problems = [
            f"{key}: stored shape {tuple(value.shape)}, model shape {tuple(own[key].shape)}"
            for key, value in state_dict.items()
            if key in own and own[key].shape != value.shape and not (grows and fills_first_rows(value, own[key]))
        ]
        if problems:
            raise ShapeError(f"model of {label} does not fit this config: " + "; ".join(problems))
        with torch.no_grad():
            for key, value in state_dict.items():
                if key in own and own[key].shape == value.shape:
                    own[key].copy_(value)
                elif key in own:  # fewer rows (checked above): the first ones
                    own[key][: len(value)].copy_(value)
        if optim is not None and self.optimizer is not None:
            loaded = state_from_bytes(optim)
            try:
                self.optimizer.load_optimizer_state_dict(loaded, grows=grows)
            except ValueError as exc:
                raise ShapeError(f"optimizer state of {label} does not fit this config: {exc}") from exc


def fills_first_rows(stored: torch.Tensor, own: torch.Tensor) -> bool:
    """Whether ``stored`` is ``own`` with fewer rows (same trailing shape)."""
    return stored.dim() == own.dim() >= 1 and stored.shape[1:] == own.shape[1:] and stored.shape[0] < own.shape[0]


def split_evenly(indices: torch.Tensor, parts: int) -> list[torch.Tensor]:
    """``parts`` contiguous slices of nearly equal length (some may be empty)."""
    bounds = [len(indices) * i // parts for i in range(parts + 1)]
    return [indices[bounds[i] : bounds[i + 1]] for i in range(parts)]


def config_json_text(config_dict: dict[str, Any]) -> str:
    """The ``config/json`` attribute text PBG writes on checkpoint files."""
    return json.dumps(config_dict, sort_keys=True)
