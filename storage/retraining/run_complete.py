"""Whether a checkpoint directory holds a complete committed version: a model worth keeping or starting from.

A retraining run directory is complete when its ``checkpoint_version.txt`` names a version
``v >= 1`` and every file of that version is there: ``model.v{v}.h5`` and
``embeddings_{type}_{part}.v{v}.h5`` of every partition of every entity type a relation uses
(the run's ``config.json`` says which). A pointer ahead of its files (an interrupted copy or sync
writes the small file first), a directory emptied by hand, or one that never committed is not.
Records that keep or name a run (``latest.json``, pruning) ask this before they rely on it.
"""

from __future__ import annotations

from typing import Any

from pbg_core.session.partitions import PartitionTopology
from storage import layout
from storage.checkpoints import CheckpointStore
from storage.errors import DataNotFound
from storage.fs import reads
from storage.fs.urls import StorageOptions


def missing_from_run(url: str, storage_options: StorageOptions = None) -> str | None:
    """What the checkpoint directory ``url`` lacks to be a complete committed version; None if nothing.

    Returns:
        A phrase for an error message (``"no checkpoint_version.txt (nothing committed)"``,
        ``"checkpoint_version.txt says version 3, but model.v3.h5 is missing"``), or None when complete.

    Raises:
        BadDataError: ``checkpoint_version.txt`` or ``config.json`` is not what it must be.
    """
    if not reads.isdir(url, storage_options):
        return "the directory does not exist"
    store = CheckpointStore(url, storage_options)
    version = store.read_version()
    if version == 0:
        return f"no committed version ({layout.VERSION_FILE} is missing or 0)"
    present = set(reads.listdir(url, storage_options))
    try:
        wanted = [layout.model_file(version), *_embedding_files(store.load_config(), version)]
    except DataNotFound:
        wanted = [layout.model_file(version)]  # no config.json: the model file is all that can be checked
    missing = [name for name in wanted if name not in present]
    if not missing:
        return None
    if len(missing) == 1:
        return f"{layout.VERSION_FILE} says version {version}, but {missing[0]} is missing"
    return f"{layout.VERSION_FILE} says version {version}, but {missing[0]} and {len(missing) - 1} more of its files are missing"


def _embedding_files(config: dict[str, Any], version: int) -> list[str]:
    """``embeddings_{type}_{part}.v{version}.h5`` of every partition of every type a relation uses."""
    entities = config.get("entities") or {}
    relations = config.get("relations") or []
    try:
        topology = PartitionTopology.build(
            {name: int((entity or {}).get("num_partitions", 1)) for name, entity in entities.items()},
            [(str(r["lhs"]), str(r["rhs"])) for r in relations],
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return []  # a config.json this cannot read: the model file is still checked
    return [
        layout.embeddings_file(entity, part, version)
        for entity, count in topology.num_partitions.items()
        for part in range(count)
    ]


__all__ = ["missing_from_run"]
