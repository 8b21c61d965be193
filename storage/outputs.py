"""Where a command's output files go: distinct files with room for them, published together or not at all.

Shared by the commands that write files a user names (``pbg export``: ``what="export"``); ``what``
is the noun their messages use (``the export``, ``export output(s)``).

- :func:`check_distinct`: two outputs that are one file (however spelled: ``X``, ``./X``, an
  absolute path, a symlink to it) are refused, and so is an output that is one of the command's
  inputs (the config file, a file of ``checkpoint_path`` or ``entity_path``); both are named.
- :func:`staged_outputs`: outputs that exist are refused, unless ``replace`` (a command's
  ``--force``) lets a file be published over (never a directory); the disk space their estimated
  sizes need is checked per filesystem (:func:`storage.disk_space.check_free_space`); each is
  written under a temporary name (next to it on local disk, in the read cache's directory for a
  remote store) and published when all are complete, each in one step (a rename, one upload), so a
  reader sees the old file or the new one, never part of one. If anything fails, every output
  that did not exist before and was published so far, and every directory created for them, is
  removed (a file that existed is never removed: what it holds is complete, old or new); a disk
  that fills up anyway is reported as :class:`~storage.disk_space.NoSpaceForOutput` naming the
  output being written, not as the OS's or HDF5's error.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from storage import read_cache
from storage.disk_space import check_free_space, is_out_of_space, nearest_existing_dir, no_space_while_writing
from storage.errors import OutputExistsError, StorageError
from storage.fs import atomic, changes, reads, urls

logger = logging.getLogger(__name__)


class OutputsOverlap(StorageError, ValueError):
    """Two outputs of one command are one file, or an output is one of the command's inputs."""


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
    *,
    what: str,
) -> None:
    """Refuse outputs that are one file, or an output that is an input, before anything is read or written.

    Args:
        outputs: (name the user knows it by, e.g. ``--entities-output``; URL) per output file.
        input_files: (name, URL) of files the command reads, e.g. the config file.
        input_dirs: (name, URL) of directories the command reads (``checkpoint_path``,
            ``entity_path``): an output that is an existing file in one of them is refused.
        storage_options: Filesystem keyword arguments.
        what: The command's noun in messages (``export``: "the config this export reads").

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
                    url, f"{name} names {where}, {input_name} this {what} reads; give a new file to write"
                )
        for dir_name, dir_url in input_dirs:
            directory = place(dir_url, storage_options)
            if where.startswith(directory.rstrip("/") + "/") and reads.exists(url, storage_options):
                raise OutputsOverlap(
                    url,
                    f"{name} names {where}, a file of {dir_name} {dir_url} that this {what} reads; give a new file",
                )


class Staging:
    """The local paths a command writes its outputs to, and which one it is writing (for a full disk's error)."""

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
def staged_outputs(
    sizes: Mapping[str, int], storage_options: Any, *, what: str, replace: bool = False
) -> Iterator[Staging]:
    """A :class:`Staging` for the outputs ``sizes`` names; they are published only if the block succeeds.

    Args:
        sizes: Output URL -> its estimated bytes (checked against the free space, per filesystem).
        storage_options: Filesystem keyword arguments.
        what: The command's noun in messages (``export``: "not enough disk space for the export").
        replace: Publish over outputs that exist (each replaced in one step); without it they are refused.

    Raises:
        OutputExistsError: outputs exist (all are named; nothing is written), or with ``replace``
            an output is a directory.
        NoSpaceForOutput: their filesystem has less room than they need, or filled up while they
            were written (nothing is left behind).
    """
    output_urls = list(sizes)
    existing = _existing_outputs(output_urls, storage_options, what, replace)
    directories = {url: _staging_dir(url, storage_options) for url in output_urls}
    check_free_space([(url, directories[url], sizes[url]) for url in output_urls], f"the {what}")
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
                    raise _full_disk_error(err, staging, sizes, directories, what) from err
                raise
    except BaseException as err:
        # Whatever is at an output that did not exist above is ours, and so are the directories
        # that did not exist (a failed command leaves no empty output folder). An output that
        # existed holds a complete file, its old one or (published before the failure) the new one.
        for url in output_urls:
            if url not in existing:
                changes.remove(url, missing_ok=True, storage_options=storage_options)
        for parent in created:
            changes.remove_empty_dir(parent, storage_options)
        if isinstance(err, OSError) and is_out_of_space(err):  # creating a directory or publishing
            raise _full_disk_error(err, None, sizes, directories, what) from err
        raise


def _existing_outputs(output_urls: Sequence[str], storage_options: Any, what: str, replace: bool) -> set[str]:
    """The outputs that exist, once checked they may be replaced.

    Raises:
        OutputExistsError: see :func:`staged_outputs`.
    """
    existing = [url for url in output_urls if reads.exists(url, storage_options)]
    if existing and not replace:
        raise OutputExistsError(existing[0], f"refusing to overwrite {what} output(s) {', '.join(existing)}")
    directories = [url for url in existing if reads.isdir(url, storage_options)]
    if directories:
        raise OutputExistsError(
            directories[0], f"is a directory, and the {what} replaces files only: give the name of a file"
        )
    if existing:
        logger.info("replacing existing %s output(s) %s once all are written", what, ", ".join(existing))
    return set(existing)


def _staging_dir(url: str, storage_options: Any) -> str:
    """The local directory ``url``'s bytes are written to (see :func:`storage.fs.atomic.local_write`)."""
    filesystem, path = urls.resolve(url, storage_options)
    if urls.is_local(filesystem):
        return os.path.dirname(path) or "/"
    return read_cache.cache_dir()


def _full_disk_error(
    err: OSError, staging: Staging | None, sizes: Mapping[str, int], directories: Mapping[str, str], what: str
) -> StorageError:
    """The :class:`~storage.disk_space.NoSpaceForOutput` of a full disk (``staging``: measured before the
    partial files go; None: they are gone, nothing counted as written)."""
    current = staging.current if staging is not None and staging.current else next(iter(sizes))
    device = _device(directories[current])
    on_device = [url for url in sizes if _device(directories[url]) == device]
    written = sum(_size(staging.local(url)) for url in on_device) if staging is not None else 0
    needed = sum(sizes[url] for url in on_device)
    return no_space_while_writing(err, current, directories[current], needed, written, f"the {what}")


def _device(directory: str) -> int:
    return os.stat(nearest_existing_dir(directory)).st_dev


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
