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
from typing import Any

from pbg_core.session.memory_plan import gb
from storage import layout
from storage.config_loader import local_path
from storage.errors import StorageError

BLOCK = 4096  # the allocation unit assumed (ext4, xfs, tmpfs): a file takes whole blocks
HDF5_BASE = 16 * 1024  # an HDF5 checkpoint file's own structures (measured: at most 12 KiB)
PER_DATASET = 3 * 1024  # each further dataset of a file (measured: at most 2.9 KiB)


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


def hdf5_file_bytes(data_bytes: int, attrs_bytes: int, datasets: int = 1) -> int:
    """An upper bound of the disk space a checkpoint HDF5 file takes (``st_blocks * 512``).

    Measured (docs/checkpoint-protocol.md, "Disk space"): beyond its data, a file takes at most
    12 KiB (superblock, groups, dataset headers, torch.save's framing of the optimizer state),
    under twice the bytes of its root attributes (``config/json`` is stored in the object header,
    which HDF5 grows by doubling), and under 3 KiB for each further dataset (a model parameter:
    its header, name, ``state_dict_key`` and optimizer entry); the filesystem rounds up to whole
    blocks and keeps its own block maps.

    Args:
        data_bytes: The datasets' bytes: float32 embeddings and row-Adagrad sums, or the model's
            parameters and their Adagrad sums.
        attrs_bytes: The root attributes' bytes (:func:`attrs_bytes`).
        datasets: The file's datasets besides the optimizer state (the model: one per parameter).
    """
    raw = data_bytes + HDF5_BASE + 2 * attrs_bytes + max(0, datasets - 1) * PER_DATASET + data_bytes // 256
    return blocks(raw)


def attrs_bytes(config_json: str) -> int:
    """The root attributes of a checkpoint file: ``config/json`` plus ``format_version`` and ``iteration/*``."""
    return len(config_json.encode("utf-8")) + 1024


def model_datasets(config: Any) -> int:
    """An upper bound of the model file's datasets from the config (``ConfigSchema``): two per
    relation (an operator has at most two tensors), four in dynamic mode (both sides), one global
    embedding per entity type."""
    relations = 4 if config.dynamic_relations else 2 * len(config.relations)
    return relations + (len(config.entities) if config.global_emb else 0)


def blocks(num_bytes: int) -> int:
    """``num_bytes`` rounded up to whole :data:`BLOCK` s (what a file of that size takes)."""
    return -(-num_bytes // BLOCK) * BLOCK


def file_bytes_on_disk(path: str) -> int:
    """The blocks the local file ``path`` takes (``st_blocks * 512``); 0 when it does not exist."""
    try:
        return os.stat(path).st_blocks * 512
    except OSError:
        return 0


def version_files_bytes(checkpoint_path: str, version: int) -> int:
    """The blocks the embeddings and model files of ``version`` take in a local checkpoint directory
    (0 if remote): what copying them (a snapshot) takes, hard-linked files included."""
    local = local_path(checkpoint_path)
    if local is None or not os.path.isdir(local):
        return 0
    names = [entry.name for entry in os.scandir(local) if layout.parse_checkpoint_file(entry.name) == version]
    return sum(file_bytes_on_disk(os.path.join(local, name)) for name in names)


def rewrite_bytes(path: str, added: int) -> int:
    """What rewriting the local file ``path`` atomically with ``added`` more bytes takes: the whole
    new file, written beside the old one, which keeps its blocks until the rename."""
    return blocks(file_bytes_on_disk(path) + added)


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
