"""Where an export's files go: distinct new files with room for them, published together or not at all.

- :func:`check_distinct`: two outputs that are one file (however spelled: ``X``, ``./X``, an
  absolute path, a symlink to it) are refused, and so is an output that is one of the export's
  inputs (the config file, a file of ``checkpoint_path`` or ``entity_path``); both are named.
- :func:`staged_outputs`: outputs that exist are refused; the disk space their estimated sizes
  need is checked per filesystem (:func:`storage.disk_space.check_free_space`); each is written
  under a temporary name (next to it on local disk, in the read cache's directory for a remote
  store) and published when all are complete. If anything fails, every output published so far
  and every directory created for them are removed; a disk that fills up anyway is reported as
  :class:`~storage.disk_space.NoSpaceForOutput` naming the output being written, not as the OS's
  or HDF5's error.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from storage import read_cache
from storage.disk_space import check_free_space, is_out_of_space, nearest_existing_dir, no_space_while_writing
from storage.errors import OutputExistsError, StorageError
from storage.fs import atomic, changes, reads, urls

WHAT = "the export"


class OutputsOverlap(StorageError, ValueError):
    """Two outputs of one export are one file, or an output is one of the export's inputs."""


def place(url: str, storage_options: Any = None) -> str:
    """The file ``url`` names, spelled one way: a local path absolute with its symlinks resolved
    (a dangling one's too: writing through it would write its target), a remote URL normalised."""
    filesystem, path = urls.resolve(url, storage_options)
    if urls.is_local(filesystem):
        return os.path.realpath(path)
    protocol = filesystem.protocol if isinstance(filesystem.protocol, str) else filesystem.protocol[0]
    return f"{protocol}://{os.path.normpath(path)}"


def check_distinct(
    outputs: Sequence[tuple[str, str]],
    input_files: Sequence[tuple[str, str]] = (),
    input_dirs: Sequence[tuple[str, str]] = (),
    storage_options: Any = None,
) -> None:
    """Refuse outputs that are one file, or an output that is an input, before anything is read or written.

    Args:
        outputs: (name the user knows it by, e.g. ``--entities-output``; URL) per output file.
        input_files: (name, URL) of files the export reads, e.g. the config file.
        input_dirs: (name, URL) of directories the export reads (``checkpoint_path``,
            ``entity_path``): an output that is an existing file in one of them is refused.

    Raises:
        OutputsOverlap: naming both names, both spellings and the file.
    """
    places = [(name, url, place(url, storage_options)) for name, url in outputs]
    for index, (name, url, where) in enumerate(places):
        for other_name, other_url, other in places[:index]:
            if where == other:
                spelled = f"{other_url!r} and {url!r}" if url != other_url else f"{url!r} for both"
                raise OutputsOverlap(
                    url, f"{other_name} and {name} name the same file {where} ({spelled}); give each its own file"
                )
        for input_name, input_url in input_files:
            if where == place(input_url, storage_options):
                raise OutputsOverlap(
                    url, f"{name} names {where}, {input_name} this export reads; give a new file to write"
                )
        for dir_name, dir_url in input_dirs:
            directory = place(dir_url, storage_options)
            if where.startswith(directory.rstrip("/") + "/") and reads.exists(url, storage_options):
                raise OutputsOverlap(
                    url, f"{name} names {where}, a file of {dir_name} {dir_url} that this export reads; give a new file"
                )


class Staging:
    """The local paths an export writes to, and which output it is writing (for a full disk's error)."""

    def __init__(self, local_paths: Mapping[str, str]) -> None:
        self._local_paths = dict(local_paths)
        self.current: str | None = None

    def paths(self, *output_urls: str) -> list[str]:
        """The local paths to write ``output_urls`` to; from now on the first of them is being written."""
        self.current = output_urls[0]
        return [self._local_paths[url] for url in output_urls]

    def path(self, output_url: str) -> str:
        """The local path to write ``output_url`` to (see :meth:`paths`)."""
        return self.paths(output_url)[0]

    def local(self, output_url: str) -> str:
        """Where ``output_url`` is being written (without marking it the current one)."""
        return self._local_paths[output_url]


@contextlib.contextmanager
def staged_outputs(sizes: Mapping[str, int], storage_options: Any) -> Iterator[Staging]:
    """A :class:`Staging` for the outputs ``sizes`` names; they are published only if the block succeeds.

    Args:
        sizes: Output URL -> its estimated bytes (checked against the free space, per filesystem).
        storage_options: Filesystem keyword arguments.

    Raises:
        OutputExistsError: outputs exist (all are named; nothing is written).
        NoSpaceForOutput: their filesystem has less room than they need, or filled up while they
            were written (nothing is left behind).
    """
    output_urls = list(sizes)
    existing = [url for url in output_urls if reads.exists(url, storage_options)]
    if existing:
        raise OutputExistsError(existing[0], f"refusing to overwrite export output(s) {', '.join(existing)}")
    directories = {url: _staging_dir(url, storage_options) for url in output_urls}
    check_free_space([(url, directories[url], sizes[url]) for url in output_urls], WHAT)
    parents = sorted({url.rstrip("/").rpartition("/")[0] for url in output_urls if "/" in url.rstrip("/")})
    created = [parent for parent in parents if not reads.exists(parent, storage_options)]
    try:
        with contextlib.ExitStack() as stack:
            local = {url: stack.enter_context(atomic.local_write(url, storage_options)) for url in output_urls}
            staging = Staging(local)
            try:
                yield staging
            except OSError as err:  # measured while the partial files are still there
                if is_out_of_space(err):
                    raise _full_disk_error(err, staging, sizes, directories) from err
                raise
    except BaseException as err:
        # None of the outputs existed above: whatever is there now is ours, and so are the
        # directories that did not exist (a failed export leaves no empty output folder).
        for url in output_urls:
            changes.remove(url, missing_ok=True, storage_options=storage_options)
        for parent in created:
            changes.remove_empty_dir(parent, storage_options)
        if isinstance(err, OSError) and is_out_of_space(err):  # creating a directory or publishing
            raise _full_disk_error(err, None, sizes, directories) from err
        raise


def _staging_dir(url: str, storage_options: Any) -> str:
    """The local directory ``url``'s bytes are written to (see :func:`storage.fs.atomic.local_write`)."""
    filesystem, path = urls.resolve(url, storage_options)
    if urls.is_local(filesystem):
        return os.path.dirname(path) or "/"
    return read_cache.cache_dir()


def _full_disk_error(
    err: OSError, staging: Staging | None, sizes: Mapping[str, int], directories: Mapping[str, str]
) -> StorageError:
    """The :class:`~storage.disk_space.NoSpaceForOutput` of a full disk (``staging``: measured before the
    partial files go; None: they are gone, nothing counted as written)."""
    current = staging.current if staging is not None and staging.current else next(iter(sizes))
    device = _device(directories[current])
    on_device = [url for url in sizes if _device(directories[url]) == device]
    written = sum(_size(staging.local(url)) for url in on_device) if staging is not None else 0
    needed = sum(sizes[url] for url in on_device)
    return no_space_while_writing(err, current, directories[current], needed, written, WHAT)


def _device(directory: str) -> int:
    return os.stat(nearest_existing_dir(directory)).st_dev


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
