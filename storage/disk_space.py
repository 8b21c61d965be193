"""Free disk space for a local checkpoint, checked before a version's (or a bucket's) files are written.

A full disk in the middle of writing version ``v + 1`` would fail the run after the work was done;
checking first fails it before, with the bytes needed and free, and version ``v`` untouched (it is
never written to: see docs/checkpoint-protocol.md). Only local checkpoint paths are checked: an
object store (``s3://``) has no free-space figure to ask for, so nothing is checked there.

No import of torch, fsspec or Prefect: ``pbg train`` runs the first check before its server starts.
"""

from __future__ import annotations

import os
import shutil

from pbg_core.session.memory_plan import gb
from storage import layout
from storage.config_loader import local_path
from storage.errors import StorageError


class NoSpaceForCheckpoint(StorageError):
    """The checkpoint's disk has less free space than the next write needs."""


def nearest_existing_dir(path: str) -> str:
    """``path`` if it is a directory, else its closest existing ancestor (what a write would create it under)."""
    current = os.path.abspath(path)
    while not os.path.isdir(current) and os.path.dirname(current) != current:
        current = os.path.dirname(current)
    return current


def free_bytes(path: str) -> int:
    """Bytes free for this user on the filesystem that holds (or would hold) ``path``."""
    return shutil.disk_usage(nearest_existing_dir(path)).free


def version_bytes_on_disk(checkpoint_path: str, version: int) -> int:
    """Bytes of ``version``'s embeddings and model files already written in a local checkpoint directory (0 if remote).

    A file that is a hard link to a bucket-progress save (a promoted one) shares that save's
    bytes: it is not counted, as promoting it took no room.
    """
    local = local_path(checkpoint_path)
    if local is None or not os.path.isdir(local):
        return 0
    total = 0
    for entry in os.scandir(local):
        if entry.is_file() and layout.parse_checkpoint_file(entry.name) == version:
            stat = entry.stat()
            total += stat.st_size if stat.st_nlink == 1 else 0
    return total


def check_disk_space(checkpoint_path: str, needed: int, committed_version: int, what: str) -> None:
    """Raise :class:`NoSpaceForCheckpoint` when a local ``checkpoint_path`` has less than ``needed`` bytes free.

    Args:
        checkpoint_path: The config's checkpoint_path (remote URLs are not checked).
        needed: Bytes the next write takes.
        committed_version: The committed version (named in the message: it stays intact).
        what: What is about to be written, e.g. ``checkpoint version 3``.
    """
    local = local_path(checkpoint_path)
    if local is None or needed <= 0:
        return
    where = nearest_existing_dir(local)
    free = shutil.disk_usage(where).free
    if free >= needed:
        return
    kept = (
        f"the committed version {committed_version} is intact"
        if committed_version > 0
        else "no version is committed yet, so nothing is lost"
    )
    raise NoSpaceForCheckpoint(
        checkpoint_path,
        f"not enough disk space for {what}: {needed} bytes ({gb(needed)}) needed, {free} bytes ({gb(free)}) "
        f"free on the filesystem of {where}; {kept} (free some space or give a checkpoint_path on a larger disk)",
    )
