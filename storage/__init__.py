"""storage: PBG-compatible files (entities, edges, checkpoints, stats) through fsspec + h5py.

Every store takes a URL (local path, ``file://``, later ``s3://``) plus optional
fsspec ``storage_options``; :mod:`storage.fs` is the only module that resolves URLs.
"""

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

__all__ = [
    "AccessDenied",
    "BadDataError",
    "BadUrlError",
    "CheckpointMetadata",
    "CheckpointStore",
    "DataNotFound",
    "EdgeStore",
    "EntityStore",
    "FormatVersionError",
    "StatsLog",
    "StorageError",
    "TransientStorageError",
]
