"""Free disk space for a local checkpoint, checked before a version's (or a bucket's) files are written.

A full disk in the middle of writing version ``v + 1`` would fail the run after the work was done;
checking first fails it before, with the bytes needed and free, and version ``v`` untouched (it is
never written to: see docs/checkpoint-protocol.md). Only local checkpoint paths are checked: an
object store (``s3://``) has no free-space figure to ask for, so nothing is checked there.

Other outputs (``pbg export``'s files) are checked the same way by :func:`check_free_space`, per
filesystem their bytes land on; a disk that fills up anyway while they are written (an estimate
short of the truth, another writer) is recognised by :func:`is_out_of_space` (the OS's ENOSPC or
EDQUOT, also inside HDF5's messages) and told by :func:`no_space_while_writing`, in the same terms.

No import of torch, fsspec or Prefect: ``pbg train`` runs the first check before its server starts.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Sequence
from typing import Any

from pbg_core.session.memory_plan import gb
from storage import layout
from storage.config_loader import local_path
from storage.errors import OutputNotWritable, StorageError

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


NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# HDF5 puts the OS's errno into its message text only: "... errno = 28, error message = 'No space left on device'".
_HDF5_ERRNO = re.compile(r"\berrno = (\d+)")


class NoSpaceForOutput(StorageError):
    """An output's disk has less free space than writing it needs, or filled up while it was written."""


def is_out_of_space(err: BaseException) -> bool:
    """Whether ``err``, or an error it was raised from, is a full disk or an exceeded quota (ENOSPC, EDQUOT).

    h5py raises a plain ``OSError`` whose text carries HDF5's ``errno = 28``: that counts too.
    """
    return _no_space_errno(err) is not None


def _no_space_errno(err: BaseException) -> int | None:
    """ENOSPC or EDQUOT when ``err`` or an error of its chain is one (see :func:`is_out_of_space`), else None."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in NO_SPACE_ERRNOS:
            return current.errno
        found = [int(number) for number in _HDF5_ERRNO.findall(str(current)) if int(number) in NO_SPACE_ERRNOS]
        if found:
            return found[0]
        current = current.__cause__ or current.__context__
    return None


def check_free_space(writes: Sequence[tuple[str, str, int]], what: str) -> None:
    """Raise :class:`NoSpaceForOutput` when files about to be written need more than their filesystem has free.

    Args:
        writes: (URL the error names, local directory the bytes go to, bytes) per file; the
            directory need not exist yet. Files on one filesystem are summed.
        what: What is written, e.g. ``the export``.

    Raises:
        NoSpaceForOutput: naming the largest file of the filesystem that lacks room, the bytes
            needed there and free.
        OutputNotWritable: a file would go to a filesystem of no size (``/proc``), where none can be written.
    """
    by_device: dict[int, list[tuple[str, str, int]]] = {}
    for url, directory, needed in writes:
        where = nearest_existing_dir(directory)
        by_device.setdefault(os.stat(where).st_dev, []).append((url, where, needed))
    for group in by_device.values():
        needed = sum(size for _, _, size in group)
        where = group[0][1]
        usage = shutil.disk_usage(where)
        if usage.total == 0:  # a filesystem of no size (/proc, /sys): no file can be written, whatever is free
            raise OutputNotWritable(
                group[0][0],
                f"the directory {where} is not writable: its filesystem has no size (as /proc, /sys); write elsewhere",
            )
        free = usage.free
        if free < needed:
            largest = max(group, key=lambda write: write[2])[0]
            others = f" by {len(group)} files" if len(group) > 1 else ""
            raise NoSpaceForOutput(
                largest,
                f"not enough disk space for {what}: about {_amount(needed)} needed{others} on the filesystem of "
                f"{where}, {_amount(free)} free; nothing was written (free some space, or write to a larger disk)",
            )


def no_space_while_writing(
    err: BaseException, url: str, directory: str, needed: int, written: int, what: str
) -> NoSpaceForOutput:
    """The error for a disk that filled up while ``url`` was written (call it before the partial files go).

    Args:
        err: The full disk's error (see :func:`is_out_of_space`).
        url: The output being written.
        directory: The local directory its bytes went to.
        needed: Bytes the estimate said that filesystem needed.
        written: Bytes written there when it ran out.
        what: What was written, e.g. ``the export``.
    """
    where = nearest_existing_dir(directory)
    stats = os.statvfs(where)
    free = stats.f_bavail * stats.f_frsize
    remedy = "free some space, or write to a larger disk"
    if _no_space_errno(err) == errno.EDQUOT:
        ran_out = "your disk quota ran out"
    elif stats.f_files and stats.f_favail == 0:
        ran_out, remedy = "the filesystem ran out of inodes (it can hold no more files)", "remove some files"
    else:
        ran_out = "the disk filled up"
    return NoSpaceForOutput(
        url,
        f"{ran_out} while writing {what}: about {_amount(needed)} needed on the filesystem of {where}, "
        f"{_amount(written)} written, {_amount(free)} free; the partial files are removed ({remedy})",
    )


def _amount(num_bytes: int) -> str:
    """``172,032 bytes (168.0 KiB)``: exact, and readable."""
    scaled, unit = float(num_bytes), "bytes"
    for next_unit in ("KiB", "MiB", "GiB", "TiB"):
        if scaled < 1024:
            break
        scaled, unit = scaled / 1024, next_unit
    return f"{num_bytes:,} bytes" + (f" ({scaled:.1f} {unit})" if unit != "bytes" else "")
