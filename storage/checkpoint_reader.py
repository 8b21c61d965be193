"""One committed checkpoint version, read-only: its version, row names, model state, partitions and rows.

What every reader of a trained model shares (``pbg export`` today): a :class:`CheckpointReader`
opens a version of ``config.checkpoint_path`` and reads nothing but that version's files (and
the names their rows follow); it writes nothing and takes no lease (the caller registers as a
reader of ``entity_path`` while it reads there, :mod:`storage.entity_lease`).

- **Version**: None means the latest committed one (``checkpoint_version.txt``), checked complete
  first (:meth:`storage.checkpoints.CheckpointStore.check_complete`): a pointer ahead of its
  files is one line naming both versions, not a missing file. A version ``N`` is any committed
  or older one whose files are present; else :class:`~storage.errors.DataNotFound` names the
  versions present.
- **Names**: each row is labelled with the name its checkpoint file records
  (:func:`storage.reader_names.export_labels`), so the rows keep their names after a re-import of
  ``entity_path``; rows without a record are labelled by position (one warning, once the caller is
  done: :meth:`CheckpointReader.warn_unrecorded`).
- **Rows**: a whole partition (:meth:`~CheckpointReader.load_partition`, into a buffer the caller
  may reuse), every partition with its names and ``global_emb`` added as PBG's export does
  (:meth:`~CheckpointReader.partitions`), or selected rows only
  (:meth:`~CheckpointReader.load_rows`: one sorted HDF5 selection, never the whole partition).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from pbg_core.session.build import version_layout
from pbg_core.types import EntityName, ModuleStateDict, Partition
from storage import hdf5, layout
from storage.best_version import BEST, VersionWanted, resolve_best
from storage.checkpoints import CheckpointStore, embeddings_dataset
from storage.entities import EntityStore
from storage.errors import BadDataError, DataNotFound
from storage.reader_names import export_labels

logger = logging.getLogger(__name__)


class CheckpointReader:
    """The stores, model state and row names of one committed checkpoint version.

    Args:
        config: The training config (``ConfigSchema``): checkpoint_path, entity_path, entities,
            dynamic_relations, global_emb and the storage options are read.
        version: The version to read; ``"best"``: the one ``best.json`` names; None: the latest committed one.
        entity_types: The entity types whose rows are read (their names are resolved here).
        purpose: What the reading is for, in the message of a missing version (``"to export"``).

    Raises:
        DataNotFound: nothing committed, or no files of ``version`` (the versions present named).
        IncompleteVersionError: the latest committed version's files are missing or unreadable.
        NamesChangedError: a record names a list that neither the checkpoint's ``names/`` nor the
            entity files hold (nothing is read).
    """

    def __init__(self, config: Any, version: VersionWanted | None, entity_types: Sequence[str], purpose: str) -> None:
        self.config = config
        self.options = config.storage_options_for_fs()  # the real credentials
        self.checkpoints = CheckpointStore(config.checkpoint_path, self.options)
        self.entity_store = EntityStore(config.entity_path, self.options)
        self.version = resolve_version(self.checkpoints, config.checkpoint_path, version, purpose)
        if not isinstance(
            version, int
        ):  # the latest or the best: a pointer ahead of its files is named, not a missing file (rows: below)
            self.checkpoints.check_complete(self.version, version_layout(config))
        keys = [(entity, part) for entity in entity_types for part in range(config.entities[entity].num_partitions)]
        self.labels = export_labels(self.checkpoints, self.version, self.entity_store, keys, config.dynamic_relations)
        has_model = self.checkpoints.has_model(self.version)
        self.state_dict: ModuleStateDict = self.checkpoints.load_model(self.version)[0] if has_model else {}

    def warn_unrecorded(self) -> None:
        """Once the caller's output is written: one warning if rows without a names record were labelled by
        position (not before: a command refused for another reason says that one thing)."""
        if self.labels.unrecorded:
            logger.warning(
                "checkpoint_path %s version %d has no record of the names its rows belong to for %s (written by "
                "PBG, or before pbg-flow recorded them): rows were labelled by position with the names %s lists now",
                self.config.checkpoint_path,
                self.version,
                ", ".join(self.labels.unrecorded),
                self.config.entity_path,
            )

    def shape(self, entity: EntityName) -> tuple[int, int]:
        """(rows over all partitions, dim) of ``entity``'s stored embeddings, without reading them.

        Raises:
            BadDataError: the partitions have different dimensions.
        """
        shapes = [
            self.checkpoints.embeddings_shape(entity, part, self.version)
            for part in range(self.config.entities[entity].num_partitions)
        ]
        dims = {dim for _, dim in shapes}
        if len(dims) > 1:
            raise BadDataError(
                self.config.checkpoint_path,
                f"embeddings of {entity!r} (v{self.version}) have different dimensions across partitions: {shapes}",
            )
        return sum(rows for rows, _ in shapes), dims.pop() if dims else self.config.entity_dimension(entity)

    def relation_names(self) -> list[str] | None:
        """Dynamic mode: the relation types the model's parameter rows belong to, by index (their record,
        else the entity files' ``dynamic_rel_names.json``); standard mode: that file if there is one, else None."""
        if self.labels.relations is not None:
            return self.labels.relations.load()
        try:
            return self.entity_store.load_dynamic_relation_names()
        except DataNotFound:
            return None

    def global_embedding(self, entity: EntityName) -> torch.Tensor | None:
        """``entity``'s global embedding when the config adds one and the model holds it, else None."""
        return self.state_dict.get(f"global_embs.emb_{entity}") if self.config.global_emb else None

    def load_partition(self, entity: EntityName, part: Partition, out: torch.Tensor | None = None) -> torch.Tensor:
        """The stored rows of (``entity``, ``part``) as trained (no global embedding added).

        Args:
            entity: Entity type.
            part: Partition.
            out: A float32 contiguous CPU tensor of exactly the stored shape to read into (reused
                across partitions of one size); None: a new tensor.

        Raises:
            DataNotFound: the file is missing.
            ShapeError: the stored shape differs from ``out``'s.
        """
        return self.checkpoints.load_embeddings(entity, part, self.version, out=out)[0]

    def partitions(self, entity: EntityName) -> Iterator[tuple[list[str], np.ndarray]]:
        """(names, float32 [len(names), dim] embeddings incl. global_emb) per partition, in order.

        Raises:
            BadDataError: a partition's rows and its names differ in number.
        """
        global_emb = self.global_embedding(entity)
        for part in range(self.config.entities[entity].num_partitions):
            labels = self.labels.entities[(entity, part)]
            names = labels.load()
            embeddings = self.load_partition(entity, part)
            if embeddings.dim() != 2 or embeddings.shape[0] != len(names):
                raise BadDataError(
                    self.config.checkpoint_path,
                    f"embeddings of {entity!r} partition {part} (v{self.version}) have shape "
                    f"{tuple(embeddings.shape)}, expected ({len(names)}, D) to match {labels.url}",
                )
            if global_emb is not None:
                embeddings += global_emb.to(embeddings.dtype)  # in place: float32 like PBG's `+=`
            yield names, embeddings.numpy()

    def load_rows(self, entity: EntityName, part: Partition, offsets: np.ndarray) -> np.ndarray:
        """The stored rows (as trained, no global embedding) of (``entity``, ``part``) at ``offsets``.

        One HDF5 selection of the distinct offsets in increasing order (h5py reads only those rows;
        on S3 the file comes through the read cache), then the rows in the order and with the
        repeats of ``offsets``.

        Args:
            entity: Entity type.
            part: Partition.
            offsets: 1-D integer offsets into the partition, any order, repeats allowed.

        Returns:
            float32 ``[len(offsets), dim]``.

        Raises:
            DataNotFound: the file is missing.
            BadDataError: an offset outside the partition's rows (the first one named), or the file
                lacks a 2-D ``embeddings`` dataset.
        """
        wanted = np.asarray(offsets)
        if wanted.ndim != 1 or not (wanted.size == 0 or np.issubdtype(wanted.dtype, np.integer)):
            raise ValueError(f"offsets must be a 1-D array of integers, got shape {wanted.shape} of {wanted.dtype}")
        distinct, inverse = np.unique(wanted, return_inverse=True)
        url = self.checkpoints.file_url(layout.embeddings_file(entity, part, self.version))
        with hdf5.open_read(url, self.options) as hf:
            dataset = embeddings_dataset(hf, url)
            rows, dim = dataset.shape
            outside = distinct[(distinct < 0) | (distinct >= rows)]
            if outside.size:
                raise BadDataError(
                    url,
                    f"offset {int(outside[0])} of entity type {entity!r} partition {part} is outside its "
                    f"{rows} rows (0..{rows - 1}); {outside.size} offset(s) outside in all",
                )
            if distinct.size == 0:
                return np.empty((0, dim), dtype=np.float32)
            selected = np.asarray(dataset[distinct], dtype=np.float32)
        return selected[inverse.reshape(-1)]


def resolve_version(checkpoints: CheckpointStore, url: str, version: VersionWanted | None, purpose: str) -> int:
    """``version``, the latest committed one for None, or the one ``best.json`` names for ``"best"``
    (:func:`storage.best_version.resolve_best`), after checking its files are there.

    ``purpose``: what the version is for, in the messages (``"to export"``).

    Raises:
        DataNotFound: nothing committed, no files of ``version`` (the versions present are named), or
            ``"best"`` without a ``best.json``.
    """
    committed = checkpoints.read_version()
    if version == BEST:
        version = resolve_best(url, checkpoints.storage_options, committed)
    if version is None:
        if committed == 0:
            raise DataNotFound(url, f"no committed checkpoint {purpose} (checkpoint_version.txt missing or 0)")
        return committed
    present = [v for v in checkpoints.list_versions() if v <= committed]
    if version not in present:
        raise DataNotFound(
            url,
            f"no checkpoint version {version} {purpose}; versions present: "
            f"{', '.join(map(str, present)) or 'none'} (latest committed: {committed})",
        )
    return version
