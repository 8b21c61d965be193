"""A PBG checkpoint directory (PBG's ``FileCheckpointStorage``).

Formats: docs/formats.md, "Checkpoint files"; how versions are committed: docs/checkpoint-protocol.md.

Files in the directory (``v`` is a version, an integer >= 1; 0 means "nothing yet"):

- ``checkpoint_version.txt``: the committed version, ``"{v}\\n"``. Missing or empty
  means 0. Overwriting it (atomically, with fsync) *is* the commit: files of version
  ``v+1`` written before it are invisible to readers until then.
- ``embeddings_{type}_{part}.v{v}.h5``: dataset ``embeddings`` (float32, [count, dim])
  and optionally ``optimizer/state_dict`` (serialized optimizer state as ``V1`` bytes).
- ``model.v{v}.h5``: group ``model`` (``track_order=True``) with one dataset per
  parameter under its public name (``relations/0/operator/rhs/diagonal``), each with
  attribute ``state_dict_key`` = the private PyTorch name; optionally ``optimizer/state_dict``.
- Both HDF5 files carry root attributes ``format_version = 1``, ``config/json`` and
  ``iteration/{key}`` for every key of the iteration metadata.
- ``config.json``: the parsed config, JSON with indent 4.
- ``epoch_{N}/``: a preserved snapshot: real copies of one version's files plus its own
  ``checkpoint_version.txt`` (PBG uses absolute symlinks, which break when the
  directory moves; copies do not).
- ``names/{digest}.json`` and the ``names/digest`` attribute of each file: which entity (and
  dynamic relation) names the rows belong to (:mod:`storage.checkpoint_names`).

Every HDF5 file is written under a ``.tmp`` name and renamed when complete (on S3:
written locally, then uploaded in one verified PUT), so a crash while writing version
``v+1`` leaves no torn file under the real name. Snapshots on S3 are server-side copies.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import h5py
import numpy as np
import torch

from pbg_core.errors import ShapeError
from pbg_core.ports import CheckpointMetadata, CompleteVersion, VersionLayout
from pbg_core.types import EntityName, Partition
from storage import best_version, checkpoint_names, hdf5, layout, version_check
from storage.errors import BadDataError, DataNotFound
from storage.fs import atomic, changes, reads, urls
from storage.fs.urls import StorageOptions

__all__ = ["CheckpointMetadata", "CheckpointStore", "embeddings_dataset"]

logger = logging.getLogger(__name__)

EMBEDDINGS_DATASET = "embeddings"
OPTIMIZER_DATASET = "optimizer/state_dict"
MODEL_GROUP = "model"
STATE_DICT_KEY_ATTR = "state_dict_key"
CONFIG_ATTR = "config/json"
ITERATION_ATTR_PREFIX = "iteration/"


class CheckpointStore:
    """Versioned embeddings, model and optimizer state under one directory URL.

    Args:
        url: The checkpoint directory (local path, ``file://`` or other fsspec URL).
        storage_options: Filesystem keyword arguments.
    """

    def __init__(self, url: str, storage_options: StorageOptions = None) -> None:
        self.url = url
        self.storage_options = storage_options

    def file_url(self, name: str) -> str:
        """URL of the file ``name`` in this directory."""
        return urls.join_url(self.url, name)

    # -- version pointer ---------------------------------------------------------

    def read_version(self) -> int:
        """The committed version; 0 when the version file is missing or empty.

        Raises:
            BadDataError: the file holds anything but one non-negative integer.
        """
        url = self.file_url(layout.VERSION_FILE)
        try:
            text = reads.read_text(url, self.storage_options)
        except DataNotFound:
            return 0
        stripped = text.strip()
        if not stripped:
            return 0
        if not stripped.isascii() or not stripped.isdigit():
            raise BadDataError(url, f"expected one non-negative integer, got {text!r}")  # url names the file
        return int(stripped)

    def write_version(self, version: int) -> None:
        """Commit ``version``: atomically and durably overwrite the version file."""
        _check_version(version)
        atomic.write_text_atomic(self.file_url(layout.VERSION_FILE), f"{version}\n", self.storage_options)

    # -- embeddings ----------------------------------------------------------------

    def has_embeddings(self, entity: EntityName, part: Partition, version: int) -> bool:
        """Whether the embeddings file of (entity, part) exists at ``version``."""
        return reads.exists(self.file_url(layout.embeddings_file(entity, part, version)), self.storage_options)

    def save_embeddings(
        self,
        entity: EntityName,
        part: Partition,
        version: int,
        embeddings: torch.Tensor,
        optim_state: bytes | None,
        metadata: CheckpointMetadata,
    ) -> None:
        """Write ``embeddings`` ([count, dim], stored as float32) of (entity, part) as ``version``.

        Raises:
            ShapeError: ``embeddings`` is not 2-D.
        """
        _check_version(version)
        url = self.file_url(layout.embeddings_file(entity, part, version))
        if embeddings.dim() != 2:
            raise ShapeError(f"{url}: embeddings must be 2-D [count, dim], got shape {tuple(embeddings.shape)}")
        data = embeddings.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy()
        with hdf5.open_write(url, self.storage_options) as hf:
            hf.create_dataset(EMBEDDINGS_DATASET, data=data)
            _write_common(hf, optim_state, metadata)
            checkpoint_names.write_digest(hf, metadata.names.entities.get((entity, part)))  # whose rows these are

    def load_embeddings(
        self, entity: EntityName, part: Partition, version: int, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, bytes | None]:
        """Embeddings of (entity, part) at ``version`` and their serialized optimizer state.

        Args:
            entity: Entity type.
            part: Partition.
            version: Checkpoint version.
            out: Optional preallocated float32 contiguous CPU tensor (e.g. a shared-memory
                slot) of exactly the stored shape; the data is read straight into it.

        Returns:
            (``out`` or a new tensor, optimizer-state bytes or None).

        Raises:
            DataNotFound: the file is missing.
            ShapeError: the stored shape differs from ``out``'s.
            BadDataError: the file lacks a 2-D ``embeddings`` dataset.
        """
        url = self.file_url(layout.embeddings_file(entity, part, version))
        with hdf5.open_read(url, self.storage_options) as hf:
            ds = embeddings_dataset(hf, url)
            target = _target_tensor(out, ds.shape, url)
            if target.numel() > 0:  # h5py cannot read_direct an empty selection
                ds.read_direct(target.detach().numpy())
            return target, hdf5.read_bytes(hf, OPTIMIZER_DATASET)

    def embeddings_shape(self, entity: EntityName, part: Partition, version: int) -> tuple[int, int]:
        """Shape of the stored embeddings of (entity, part) at ``version``, without reading them.

        Raises:
            DataNotFound: the file is missing.
            BadDataError: the file lacks a 2-D ``embeddings`` dataset.
        """
        url = self.file_url(layout.embeddings_file(entity, part, version))
        with hdf5.open_read(url, self.storage_options) as hf:
            ds = embeddings_dataset(hf, url)
            return int(ds.shape[0]), int(ds.shape[1])

    # -- model ---------------------------------------------------------------------

    def has_model(self, version: int) -> bool:
        """Whether ``model.v{version}.h5`` exists."""
        return reads.exists(self.file_url(layout.model_file(version)), self.storage_options)

    def save_model(
        self,
        version: int,
        state_dict: Mapping[str, torch.Tensor],
        public_names: Mapping[str, str],
        optim_state: bytes | None,
        metadata: CheckpointMetadata,
    ) -> None:
        """Write the model parameters of ``version`` under their public names.

        Args:
            version: Checkpoint version.
            state_dict: Private PyTorch name -> tensor.
            public_names: Private name -> public name (``relations/{i}/operator/{side}/{param}``).
            optim_state: Serialized optimizer state, or None.
            metadata: Config JSON and iteration attributes.

        Raises:
            ValueError: a state-dict key has no public name.
        """
        _check_version(version)
        missing = [key for key in state_dict if key not in public_names]
        if missing:
            raise ValueError(f"no public name for state_dict keys {missing}; known: {sorted(public_names)}")
        with hdf5.open_write(self.file_url(layout.model_file(version)), self.storage_options) as hf:
            group = hf.create_group(MODEL_GROUP, track_order=True)
            for private, tensor in state_dict.items():
                ds = group.create_dataset(public_names[private], data=tensor.detach().cpu().numpy())
                ds.attrs[STATE_DICT_KEY_ATTR] = private
            _write_common(hf, optim_state, metadata)
            checkpoint_names.write_digest(hf, metadata.names.relations)  # which relation each dynamic row is

    def load_model(self, version: int) -> tuple[dict[str, torch.Tensor], bytes | None]:
        """The model state dict (private keys) of ``version`` and its optimizer state.

        Raises:
            DataNotFound: the file is missing.
            BadDataError: no ``model`` group, or a dataset without ``state_dict_key``.
        """
        url = self.file_url(layout.model_file(version))
        with hdf5.open_read(url, self.storage_options) as hf:
            group = hf.get(MODEL_GROUP)
            if not isinstance(group, h5py.Group):
                raise BadDataError(url, f"missing group {MODEL_GROUP!r}; found {sorted(hf.keys())}")
            state_dict: dict[str, torch.Tensor] = {}

            def collect(name: str, obj: h5py.HLObject) -> None:
                if not isinstance(obj, h5py.Dataset):
                    return
                private = obj.attrs.get(STATE_DICT_KEY_ATTR)
                if private is None:
                    raise BadDataError(url, f"dataset 'model/{name}' has no {STATE_DICT_KEY_ATTR!r} attribute")
                key = private.decode("utf-8") if isinstance(private, bytes) else str(private)
                state_dict[key] = torch.from_numpy(np.array(obj[()]))

            group.visititems(collect)
            return state_dict, hdf5.read_bytes(hf, OPTIMIZER_DATASET)

    def load_metadata(self, version: int) -> CheckpointMetadata:
        """The config JSON and iteration attributes stored on ``model.v{version}.h5``."""
        url = self.file_url(layout.model_file(version))
        with hdf5.open_read(url, self.storage_options) as hf:
            attrs = hdf5.read_attrs(hf)
        iteration = {  # written from CheckpointMetadata.iteration (int | str) by save_metadata
            k[len(ITERATION_ATTR_PREFIX) :]: v
            for k, v in attrs.items()
            if k.startswith(ITERATION_ATTR_PREFIX) and isinstance(v, int | str)
        }
        return CheckpointMetadata(config_json=str(attrs.get(CONFIG_ATTR, "")), iteration=iteration)

    # -- config ----------------------------------------------------------------------

    def save_config(self, config_dict: Mapping[str, Any]) -> None:
        """Write ``config.json`` (indent 4, like PBG)."""
        text = json.dumps(dict(config_dict), indent=4)
        atomic.write_text_atomic(self.file_url(layout.CONFIG_FILE), text, self.storage_options)

    def load_config(self) -> dict[str, Any]:
        """The content of ``config.json``.

        Raises:
            DataNotFound: the file is missing.
            BadDataError: it is not a JSON object.
        """
        url = self.file_url(layout.CONFIG_FILE)
        config = reads.read_json(url, self.storage_options).data
        if not isinstance(config, dict):
            raise BadDataError(url, f"expected a JSON object, got {type(config).__name__}")
        return config

    # -- versions on disk --------------------------------------------------------------

    def list_versions(self) -> list[int]:
        """Versions that have at least one embeddings or model file, sorted."""
        names = reads.listdir(self.url, self.storage_options)
        return sorted({v for v in map(layout.parse_checkpoint_file, names) if v is not None})

    def list_snapshots(self) -> list[int]:
        """Epochs with a preserved ``epoch_{N}`` snapshot directory, sorted."""
        names = reads.listdir(self.url, self.storage_options)
        return sorted(e for e in map(layout.parse_snapshot_dir, names) if e is not None)

    def check_complete(self, version: int, expected: VersionLayout) -> CompleteVersion:
        """Evidence that ``version`` is complete, for the steps that delete or copy (see
        :func:`storage.version_check.check_complete`: one listing plus each file's metadata).

        Raises:
            IncompleteVersionError: a file of ``version`` is missing or unreadable (one line naming
                both the version ``checkpoint_version.txt`` says and the newest complete one).
            ShapeError: its embeddings do not have the ``expected`` shapes.
        """
        return version_check.check_complete(self.url, self.storage_options, version, expected)

    def check_not_behind(self, committed: int, expected: VersionLayout) -> None:
        """Refuse a version pointer behind the directory's files (:func:`storage.version_check.check_not_behind`).

        Raises:
            IncompleteVersionError: files of a version above ``committed + 1`` exist.
        """
        version_check.check_not_behind(self.url, self.storage_options, committed, expected)

    def remove_versions_before(self, kept: CompleteVersion) -> list[int]:
        """Delete every version older than the complete version ``kept`` except 0; those removed, ascending.

        Normally one (the version a pass started from); more when a run was killed while
        removing an old one. Version 0 is never deleted: it is the user-provided
        initialization (PBG's rule). A similarity index built from an older version
        (``similar_{type}.v{v}.h5``) goes too, also one whose version went before it was written.
        The version ``best.json`` names is never deleted (:func:`storage.best_version.pinned_versions`).
        """
        self._check_evidence(kept)
        pinned = best_version.pinned_versions(self.url, self.storage_options)  # read before anything goes
        names = reads.listdir(self.url, self.storage_options)
        found = {v for v in map(layout.parse_checkpoint_file, names) if v is not None}
        old = sorted(v for v in found if 0 < v < kept.version and v not in pinned)
        for name in names:
            index = layout.parse_similarity_index_file(name)
            stale_index = index is not None and 0 < index[1] < kept.version and index[1] not in pinned
            if layout.parse_checkpoint_file(name) in old or stale_index:
                changes.remove(self.file_url(name), missing_ok=True, storage_options=self.storage_options)
        return old

    def preserve_version(self, kept: CompleteVersion, epoch: int) -> None:
        """Copy every file of the complete version ``kept`` into ``epoch_{epoch}/`` with its own version file.

        The snapshot is itself a valid checkpoint directory; its version file is written last,
        so a copy cut off reads as version 0 there. Re-running overwrites it with fresh copies
        (idempotent).
        """
        self._check_evidence(kept)
        snapshot = self.snapshot_store(epoch)
        for name in self._files_of(kept.version):
            changes.copy(self.file_url(name), snapshot.file_url(name), self.storage_options)
        checkpoint_names.copy_archive(self.url, snapshot.url, self.storage_options)  # the names its rows follow
        snapshot.write_version(kept.version)

    def snapshot_store(self, epoch: int) -> CheckpointStore:
        """The ``epoch_{epoch}/`` snapshot directory, as a store of its own."""
        return CheckpointStore(self.file_url(layout.snapshot_dir(epoch)), self.storage_options)

    def _check_evidence(self, kept: CompleteVersion) -> None:
        if kept.url != self.url:
            raise ValueError(f"{self.url}: the complete version given is of another directory, {kept.url}")

    def _files_of(self, version: int) -> list[str]:
        names = reads.listdir(self.url, self.storage_options)
        return [n for n in names if layout.parse_checkpoint_file(n) == version]


def _check_version(version: int) -> None:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"checkpoint version must be a non-negative int, got {version!r}")


def _write_common(hf: h5py.File, optim_state: bytes | None, metadata: CheckpointMetadata) -> None:
    """Optimizer state and PBG's ``config/json`` + ``iteration/*`` root attributes."""
    if optim_state is not None:
        hdf5.write_bytes(hf, OPTIMIZER_DATASET, optim_state)
    attrs: dict[str, int | str] = {CONFIG_ATTR: metadata.config_json}
    attrs.update({f"{ITERATION_ATTR_PREFIX}{k}": v for k, v in metadata.iteration.items()})
    hdf5.write_attrs(hf, attrs)


def embeddings_dataset(hf: h5py.File, url: str) -> h5py.Dataset:
    """The 2-D ``embeddings`` dataset of an open embeddings file, or BadDataError naming the file
    (:class:`CheckpointStore` and :mod:`storage.checkpoint_reader`'s row reads)."""
    ds = hdf5.require_dataset(hf, EMBEDDINGS_DATASET, url)
    if ds.ndim != 2:
        raise BadDataError(url, f"{EMBEDDINGS_DATASET!r} must be 2-D, got shape {ds.shape}")
    return ds


def _target_tensor(out: torch.Tensor | None, shape: tuple[int, ...], url: str) -> torch.Tensor:
    """``out`` after checking it can receive a dataset of ``shape``, or a new float32 tensor."""
    if out is None:
        return torch.empty(shape, dtype=torch.float32)
    if tuple(out.shape) != tuple(shape):
        raise ShapeError(f"{url}: stored embeddings have shape {tuple(shape)}, buffer has {tuple(out.shape)}")
    if out.dtype != torch.float32 or out.device.type != "cpu" or not out.is_contiguous():
        raise ValueError(
            f"{url}: buffer must be a contiguous float32 CPU tensor, got {out.dtype} on {out.device}"
            f"{'' if out.is_contiguous() else ' (non-contiguous)'}"
        )
    return out
