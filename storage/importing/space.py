"""Disk space of an import: checked before the outputs are written, and a full disk named when it happens.

After pass 1 the import knows every bucket's size, so what its outputs take is known before the
first output file is written (:func:`output_bytes`: the edges, an HDF5 header per bucket file,
the names files, every file rounded up to a 4 KiB block). :func:`check_output_space` refuses an
import whose local output filesystems have less free, naming the directory, the bytes needed
and free; nothing has been written then, and the previous import is intact. The staged files
sit beside the previous ones until the commit, so the whole of the new output must fit.

What no check can foresee (another process filling the disk meanwhile; the spill of pass 1,
whose size is known only once the inputs are read) is caught where it happens:
:func:`named_when_full` turns the OS's or HDF5's "no space left on device" into
:class:`NoSpaceForImport` naming the path being written, what was needed and what is free, and
the import rolls back as for any failure. Object stores have no free-space figure: only
local paths are checked.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow.compute as pc

from storage.disk_space import nearest_existing_dir
from storage.errors import StorageError
from storage.fs import urls

BLOCK = 4096
HDF5_HEADER = 4096  # a bucket file's superblock, attribute and dataset headers (measured: 2.0-4.1 KiB)
NAME_OVERHEAD = 8  # per name in a names file: indent, quotes, comma, newline (json.dumps(indent=4))
_ESCAPED = 6  # a name needing escapes: at most 6 bytes per byte (\\u00XX)
_FULL_TEXT = ("no space left on device", "errno = 28", "[errno 28]")


class NoSpaceForImport(StorageError):
    """The disk an import writes to has less free space than the import needs."""


def human(num_bytes: float) -> str:
    """``1,234,567 bytes (1.2 MB)``: exact, and readable."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if num_bytes >= scale:
            return f"{num_bytes:,.0f} bytes ({num_bytes / scale:.1f} {unit})"
    return f"{num_bytes:,.0f} bytes"


def _blocks(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def bucket_bytes(sizes: Sequence[int], weighted: bool) -> int:
    """Disk taken by bucket files holding ``sizes`` edges each (int64 lhs, rhs, rel; float32 weight)."""
    per_edge = 3 * 8 + (4 if weighted else 0)
    return sum(_blocks(HDF5_HEADER + size * per_edge) for size in sizes)


def names_bytes(names: Any, partitions: int) -> int:
    """Disk taken by the names and count files of one entity type (``names``: a pyarrow array of its names)."""
    count = len(names)
    if count == 0:
        return 2 * partitions * BLOCK
    data = int(pc.sum(pc.binary_length(names)).as_py() or 0)
    plain = pc.all(pc.match_substring_regex(names, r"^[\x20-\x21\x23-\x5b\x5d-\x7e]*$")).as_py()
    text = (data if plain else _ESCAPED * data) + NAME_OVERHEAD * count + 8 * partitions
    return text + BLOCK * 2 * partitions  # each file's last block, and the count files


def free_space(url: str, storage_options: Any = None) -> tuple[str, int] | None:
    """(the existing directory a local ``url`` would be written under, its bytes free); None if not local."""
    filesystem, path = urls.resolve(url, storage_options)
    if not urls.is_local(filesystem):
        return None
    where = nearest_existing_dir(path)
    return where, shutil.disk_usage(where).free


def check_output_space(needs: Sequence[tuple[str, int]], storage_options: Any = None) -> None:
    """Refuse when a local filesystem has less free than the outputs written to it need.

    Args:
        needs: (output directory URL, bytes it will take), e.g. one per edge path and the entity_path.

    Raises:
        NoSpaceForImport: naming the first directory of the short filesystem, the bytes needed and free.
    """
    per_device: dict[int, tuple[str, str, int, int]] = {}  # st_dev -> (url, where, free, needed)
    for url, needed in needs:
        found = free_space(url, storage_options)
        if found is None:
            continue
        where, free = found
        device = os.stat(where).st_dev
        first_url, first_where, _, total = per_device.get(device, (url, where, free, 0))
        per_device[device] = (first_url, first_where, free, total + needed)
    for url, where, free, needed in per_device.values():
        if needed > free:
            raise NoSpaceForImport(
                url,
                f"not enough disk space to write the import: {human(needed)} needed on the filesystem of "
                f"{where}, {human(free)} free; nothing was written (an earlier import "
                "there is intact): free some space, or give entity_path/edge_paths on a larger disk",
            )


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) says the disk is full (ENOSPC from the OS, HDF5 or h5py)."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, OSError) and current.errno == errno.ENOSPC:
            return True
        if any(text in str(current).lower() for text in _FULL_TEXT):
            return True
        current = current.__cause__ or current.__context__
    return False


@contextlib.contextmanager
def named_when_full(url: str, needed: str, storage_options: Any = None, hint: str = "") -> Iterator[None]:
    """Turn a full disk while the block writes ``url`` into :class:`NoSpaceForImport` naming it.

    ``needed``: what the write needs, as the message says it (e.g. ``"1,234,567 bytes (1.2 MB)"``).
    """
    try:
        yield
    except NoSpaceForImport:
        raise
    except (OSError, RuntimeError) as exc:
        if not is_disk_full(exc):
            raise
        found = free_space(url, storage_options)
        free = f"{human(found[1])} free on the filesystem of {found[0]}" if found else "the store is full"
        raise NoSpaceForImport(
            url,
            f"disk full while writing the import: {needed} needed, {free}; the import was undone (an earlier import there is intact)"
            + (f" ({hint})" if hint else ""),
        ) from None
