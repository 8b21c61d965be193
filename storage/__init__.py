"""storage: PBG-compatible files (entities, edges, checkpoints, stats) through fsspec + h5py.

Every store takes a URL (local path, ``file://``, later ``s3://``) plus optional
fsspec ``storage_options``; :mod:`storage.fs` is the only module that resolves URLs.

The names below are loaded on first use (PEP 562): the checkpoint and edge stores need torch,
and importing it would cost tools that only touch files (``pbg import``, ``pbg export``)
about 1.5 s and 300 MB.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "CheckpointMetadata": "storage.checkpoints",
    "CheckpointStore": "storage.checkpoints",
    "EdgeStore": "storage.edges",
    "EntityStore": "storage.entities",
    "AccessDenied": "storage.errors",
    "BadDataError": "storage.errors",
    "BadUrlError": "storage.errors",
    "DataNotFound": "storage.errors",
    "FormatVersionError": "storage.errors",
    "StorageError": "storage.errors",
    "TransientStorageError": "storage.errors",
    "StatsLog": "storage.stats_log",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from storage.checkpoints import CheckpointMetadata, CheckpointStore
    from storage.edges import EdgeStore
    from storage.entities import EntityStore
    from storage.errors import (
        AccessDenied,
        BadDataError,
        BadUrlError,
        DataNotFound,
        FormatVersionError,
        StorageError,
        TransientStorageError,
    )
    from storage.stats_log import StatsLog


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
