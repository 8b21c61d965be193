"""Opening one committed checkpoint version for answers: its reader, its model's parameters and its names.

:func:`load_version` does the reading a :class:`~storage.trained.model.Model` needs before its
first answer, while holding a reader file of ``entity_path`` (:func:`storage.entity_lease.reading`):
the version (:class:`~storage.checkpoint_reader.CheckpointReader`: the latest committed one, checked
complete, or the one asked for), the config checked against the one the version was trained
with (:func:`storage.resume_checks.check_fits`: every field that shapes the parameters or changes
how the model scores must be equal), the relation names, and the names lists of
``entity_path`` the rows belong to (a checkpoint without its ``names/``, or PBG's: read now, since
an import could rewrite them later; the checkpoint's own ``names/`` are read when first needed).
Then the model's parameters are loaded (:class:`pbg_core.session.parts.ModelState`: each stored
parameter of another shape than the config's model named). Nothing is written but the reader
file, removed at the end.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pbg_core.model.embedder import MultiRelationEmbedder, build_model
from pbg_core.session.parts import ModelState
from pbg_core.types import EntityName
from storage import layout
from storage.checkpoint_reader import CheckpointReader
from storage.entity_lease import command_label, reading
from storage.errors import DataNotFound
from storage.remap.matching import NameTable, name_table
from storage.resume_checks import LOADED, check_fits
from storage.trained.name_index import NameIndex
from storage.trained.sources import PURPOSE

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loaded:
    """One committed version, opened: its reader, its model with the version's parameters, its names."""

    reader: CheckpointReader
    embedder: MultiRelationEmbedder
    names: NameIndex


def load_version(config: Any, version: int | None) -> Loaded:
    """Open ``version`` (None: the latest committed one) of ``config.checkpoint_path``.

    Raises:
        DataNotFound: nothing committed, no files of ``version`` (the versions present named),
            a model file missing, or (dynamic mode) no names of the relation types.
        IncompleteVersionError: the latest committed version's files are missing.
        ShapeError: the config differs from the one the version was trained with in a field
            that shapes the parameters or changes the scores, or a stored parameter's shape
            differs from the model's.
        NamesChangedError: rows whose names neither the checkpoint nor the entity files hold.
        LeaseHeldError: an import is writing ``entity_path``.
    """
    types = [name for name, entity in config.entities.items() if not entity.featurized]
    with reading(config.entity_path, command_label(), config.storage_options_for_fs()):
        reader = CheckpointReader(config, version, types, PURPOSE)
        check_fits(reader.checkpoints, reader.version, config, logger, LOADED)
        relations = _relation_names(config, reader)
        loaders = {entity: _names_loader(reader, entity) for entity in types}
    embedder = _embedder(config, reader, len(relations))
    reader.warn_unrecorded()
    return Loaded(reader, embedder, NameIndex(loaders, relations))


def _relation_names(config: Any, reader: CheckpointReader) -> list[str]:
    """Relation names by id: the config's (standard mode), the model's record (dynamic mode).

    Raises:
        DataNotFound: dynamic mode, and neither the checkpoint nor ``entity_path`` names the relation types.
    """
    if not config.dynamic_relations:
        return [relation.name for relation in config.relations]
    names = reader.relation_names()
    if names is None:
        raise DataNotFound(
            f"{config.entity_path}/{layout.DYNAMIC_REL_NAMES_FILE}",
            "does not exist, and the checkpoint records no relation types: the dynamic relations cannot be named",
        )
    return names


def _names_loader(reader: CheckpointReader, entity: EntityName) -> Callable[[], NameTable]:
    """A function reading ``entity``'s names (the lists its rows belong to).

    Lists kept in the checkpoint's ``names/`` are read when first needed; lists of
    ``entity_path`` (a checkpoint without its ``names/``, or PBG's) are read now, while the
    caller holds its reader file, since an import could rewrite them later.
    """
    files = [reader.labels.entities[(entity, part)] for part in range(reader.config.entities[entity].num_partitions)]
    load = functools.partial(name_table, lambda part: files[part].load(), len(files))
    if all(file.store is not reader.entity_store for file in files):
        return load
    table = load()
    return lambda: table


def _embedder(config: Any, reader: CheckpointReader, num_relations: int) -> MultiRelationEmbedder:
    """The model of ``config`` with the parameters of the version ``reader`` reads.

    Raises:
        ShapeError: a stored parameter's shape differs from the config's model (each one named).
        DataNotFound: the model has parameters but the version no model file.
    """
    embedder = build_model(config, num_relations if config.dynamic_relations else 0)
    if any(True for _ in embedder.parameters()) and not reader.checkpoints.has_model(reader.version):
        raise DataNotFound(
            reader.checkpoints.file_url(layout.model_file(reader.version)),
            "does not exist, but the config's model has parameters (operators or global embeddings) to load",
        )
    ModelState(embedder, None).restore(reader.checkpoints, reader.version, None)
    return embedder.requires_grad_(False)


__all__ = ["Loaded", "load_version"]
