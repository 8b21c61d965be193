"""Whether a checkpoint version is complete: what every deletion of checkpoint files waits for.

Nothing is deleted before the version that is kept is known complete (docs/checkpoint-protocol.md,
"Deleting"): removing older versions, clearing bucket progress and copying a snapshot each take a
:class:`~pbg_core.ports.CompleteVersion`, which only :func:`check_complete` gives. A version
pointer ahead of its files (an interrupted copy or sync writes the small ``checkpoint_version.txt``
first) is then an error naming both versions, raised before anything is removed.

A pointer behind its files is refused too (:func:`check_not_behind`): a run writes version ``v + 1``
only while ``v`` is committed, so files of a version above ``v + 1`` mean the pointer went back
(``checkpoint_version.txt`` lost or restored from an older copy); training on would overwrite those
versions as it reached their numbers.

A version ``v`` is complete when its directory holds:

- ``embeddings_{type}_{part}.v{v}.h5`` for every (entity type, partition) of the layout (every
  partition of a partitioned type, partition 0 of an unpartitioned or featurized one), each a
  readable HDF5 file of format_version 1, not cut short, whose ``embeddings`` dataset has the
  shape (entity count, dimension), a featurized type's count being its features';
- ``model.v{v}.h5``, readable, with its ``model`` group.

PBG 1.0.0 writes the same files for every version it commits, the model file included (also for
a model without parameters), so its checkpoints are judged by the same rule. Version 0 (nothing
committed) is never deleted and is complete by definition.

Cost: one listing of the directory, then each file's HDF5 metadata only: h5py opens a local
file (a few KiB read); a remote one is read in :data:`HEADER_BLOCK` ranges, so a partition of
gigabytes costs a few requests, never a download.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar

import h5py

from pbg_core.errors import PbgError, ShapeError
from pbg_core.ports import CompleteVersion, VersionLayout
from storage import hdf5, layout
from storage.errors import BadDataError, DataNotFound, StorageError, TransientStorageError, translate
from storage.fs import reads, urls
from storage.fs.urls import StorageOptions

HEADER_BLOCK = 64 * 1024  # bytes per ranged read of a remote file's HDF5 metadata
_SHOWN = 4  # file names listed in a message before "and N more"
T = TypeVar("T")


class IncompleteVersionError(StorageError):
    """A checkpoint version that must be complete lacks files or holds unreadable ones."""


@dataclass(frozen=True)
class VersionReport:
    """What keeps one version from being complete (all empty: complete).

    Attributes:
        version: The version looked at.
        missing: File names not in the directory.
        unreadable: ``name: reason`` of files there that cannot be read back.
        misshapen: ``entity type 'x' partition p: stored shape ..., this config expects ...``.
    """

    version: int
    missing: tuple[str, ...] = ()
    unreadable: tuple[str, ...] = ()
    misshapen: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Whether nothing is missing, unreadable or of another shape."""
        return not (self.missing or self.unreadable or self.misshapen)


def inspect_version(
    url: str, storage_options: StorageOptions, version: int, expected: VersionLayout, names: Collection[str]
) -> VersionReport:
    """What keeps ``version`` of the directory ``url`` from being complete.

    Args:
        url: The checkpoint directory.
        storage_options: Filesystem keyword arguments.
        version: The version to look at (>= 1).
        expected: The embeddings every version must hold, and their shapes.
        names: The directory's listing (one listing serves every version looked at).
    """
    missing: list[str] = []
    unreadable: list[str] = []
    misshapen: list[str] = []
    for (entity, part), shape in sorted(expected.embeddings.items()):
        name = layout.embeddings_file(entity, part, version)
        found = _read_or_note(url, storage_options, name, names, _embeddings_shape, missing, unreadable)
        if found is not None and shape is not None and found != shape:
            misshapen.append(
                f"entity type {entity!r} partition {part}: stored shape {found}, "
                f"this config expects {shape} (entity count, dimension)"
            )
    _read_or_note(url, storage_options, layout.model_file(version), names, _check_model, missing, unreadable)
    return VersionReport(version, tuple(missing), tuple(unreadable), tuple(misshapen))


def is_complete(url: str, storage_options: StorageOptions, version: int, expected: VersionLayout) -> bool:
    """Whether ``version`` of ``url`` is complete (one listing; see the module docstring)."""
    names = reads.listdir(url, storage_options)
    return version == 0 or inspect_version(url, storage_options, version, expected, names).complete


def check_complete(url: str, storage_options: StorageOptions, version: int, expected: VersionLayout) -> CompleteVersion:
    """Evidence that ``version`` of the checkpoint directory ``url`` is complete.

    Raises:
        IncompleteVersionError: a file is missing or unreadable; one line naming them, the
            version ``checkpoint_version.txt`` names, the newest complete version found, that
            nothing was removed, and what the user can do.
        ShapeError: every file is there, but some embeddings do not have the config's shape.
    """
    if version == 0:
        return CompleteVersion(url, 0)
    names = reads.listdir(url, storage_options)
    report = inspect_version(url, storage_options, version, expected, names)
    if report.complete:
        return CompleteVersion(url, version)
    raise refusal(url, storage_options, report, expected, names)


def check_not_behind(url: str, storage_options: StorageOptions, committed: int, expected: VersionLayout) -> None:
    """Refuse a version pointer behind the files of the directory ``url`` (see the module docstring).

    Raises:
        IncompleteVersionError: files of a version above ``committed + 1`` exist; one line naming
            the pointer's version, the newest version found (complete or not), that nothing was
            removed, and what to do.
    """
    names = reads.listdir(url, storage_options)
    ahead = sorted({v for v in map(layout.parse_checkpoint_file, names) if v is not None and v > committed + 1})
    if not ahead:
        return
    pointer = f"says {committed}" if committed else "is missing or says 0"
    good = next(
        (v for v in reversed(ahead) if inspect_version(url, storage_options, v, expected, names).complete), None
    )
    found = (
        f"complete version {good}"
        if good is not None
        else f"files of version(s) {_some([str(v) for v in ahead])} (incomplete)"
    )
    remedy = (
        f"write {good} into checkpoint_version.txt to go on from version {good}"
        if good is not None
        else "restore the checkpoint's version file"
    )
    raise IncompleteVersionError(
        url,
        f"checkpoint_version.txt {pointer} but the directory holds {found}: the pointer is behind its files "
        f"(training on would overwrite them); nothing was removed; {remedy}, or move those files away to start "
        "over in this directory",
    )


def refusal(
    url: str, storage_options: StorageOptions, report: VersionReport, expected: VersionLayout, names: Collection[str]
) -> PbgError:
    """The one-line error for an incomplete version (see :func:`check_complete`)."""
    version = report.version
    if not report.missing and not report.unreadable:
        return ShapeError(
            f"{url} version {version} does not fit this config (another config, or entities imported "
            f"again?): {'; '.join(report.misshapen)}; nothing was removed"
        )
    pointer = _pointer(url, storage_options)
    files = _files_phrase(report, len(expected.embeddings) + 1)
    others = sorted({v for v in map(layout.parse_checkpoint_file, names) if v} - {version}, reverse=True)
    good = next((v for v in others if inspect_version(url, storage_options, v, expected, names).complete), None)
    if good is not None:
        found = f"found complete version {good}" + (" (written, never committed)" if good > pointer else "")
    elif others:
        listed = f"versions {_some([str(v) for v in others])} are" if len(others) > 1 else f"version {others[0]} is"
        found = f"found no complete version ({listed} incomplete too)"
    else:
        found = "found no other version's files"
    if pointer != version:
        lead = f"version {version}'s files are {files}, so it is not committed (checkpoint_version.txt says {pointer})"
        return IncompleteVersionError(url, f"{lead}: {found}; nothing was removed")
    lead = f"checkpoint_version.txt says {version} but version {version}'s files are {files}"
    other = (
        f"write {good} into checkpoint_version.txt to go on from version {good}"
        if good
        else "train from scratch into a new checkpoint_path"
    )
    snapshot = _snapshot_of(url, storage_options, version, expected, names)
    copy = f" (a complete copy is in {snapshot}/)" if snapshot else ""
    remedy = f"restore version {version}'s files{copy}, or {other}"
    return IncompleteVersionError(url, f"{lead}: {found}; nothing was removed; {remedy}")


def _snapshot_of(
    url: str, storage_options: StorageOptions, version: int, expected: VersionLayout, names: Collection[str]
) -> str | None:
    """The ``epoch_{N}`` snapshot directory holding ``version`` complete, if any (for the advice)."""
    for name in sorted(n for n in names if layout.parse_snapshot_dir(n) is not None):
        snapshot = urls.join_url(url, name)
        if _pointer(snapshot, storage_options) == version and is_complete(snapshot, storage_options, version, expected):
            return name
    return None


def _files_phrase(report: VersionReport, total: int) -> str:
    """``missing (2 of 3: a, b)``, or ``missing or unreadable (a missing, b: reason)``."""
    if not report.unreadable:
        return f"missing ({len(report.missing)} of {total}: {_some(report.missing)})"
    return f"missing or unreadable ({_some([f'{name} missing' for name in report.missing] + list(report.unreadable))})"


def _some(items: Collection[str]) -> str:
    shown = list(items)[:_SHOWN]
    more = len(items) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def _pointer(url: str, storage_options: StorageOptions) -> int:
    """The version ``checkpoint_version.txt`` names (0 when missing, empty or not a number)."""
    try:
        text = reads.read_text(urls.join_url(url, layout.VERSION_FILE), storage_options).strip()
    except (DataNotFound, BadDataError):
        return 0
    return int(text) if text.isascii() and text.isdigit() else 0


def _read_or_note(
    url: str,
    storage_options: StorageOptions,
    name: str,
    names: Collection[str],
    read: Callable[[h5py.File, str], T],
    missing: list[str],
    unreadable: list[str],
) -> T | None:
    """``read`` of the file ``name``'s metadata; None after noting it as missing or unreadable."""
    if name not in names:
        missing.append(name)
        return None
    try:
        return _read_header(urls.join_url(url, name), storage_options, read)
    except DataNotFound:
        missing.append(name)  # removed since the listing
    except BadDataError as err:
        unreadable.append(f"{name}: {err.problem}")
    return None


def _embeddings_shape(hf: h5py.File, url: str) -> tuple[int, ...]:
    dataset = hdf5.require_dataset(hf, "embeddings", url)
    return tuple(int(n) for n in dataset.shape)


def _check_model(hf: h5py.File, url: str) -> bool:
    if not isinstance(hf.get("model"), h5py.Group):
        raise BadDataError(url, f"missing group 'model'; found {sorted(hf.keys())}")
    return True


def _read_header(url: str, storage_options: StorageOptions, read: Callable[[h5py.File, str], T]) -> T:
    """``read(file, url)`` on the HDF5 file at ``url``, opened for its metadata only.

    Raises:
        DataNotFound: no file at ``url``.
        BadDataError: not a readable HDF5 file of format_version 1 (cut short, say), or ``read`` refuses it.
        TransientStorageError: or another storage error, when a remote read failed.
    """
    filesystem, path = urls.resolve(url, storage_options)
    if urls.is_local(filesystem):
        return _read_opened(url, path, read)
    with urls.translate_errors(url):
        remote = filesystem.open(path, "rb", block_size=HEADER_BLOCK, cache_type="blockcache")
    try:
        with hdf5.collection_paused():  # h5py reads through fsspec's thread: see there
            return _read_opened(url, _Reader(remote), read)
    finally:
        remote.close()


def _read_opened(url: str, source: str | _Reader, read: Callable[[h5py.File, str], T]) -> T:
    """:func:`_read_header` on a local path or an opened remote file."""
    try:
        with h5py.File(source, "r") as hf:
            hdf5.check_format_version(hf, url)
            return read(hf, url)
    except StorageError:
        raise
    except (OSError, KeyError, RuntimeError, ValueError) as err:
        problem = _problem(url, source, err)
    # Raised here, not in the handler, so that it does not keep h5py's error (and through its
    # traceback h5py's file-access list, see _Reader) as its context.
    raise problem


def _problem(url: str, source: str | _Reader, err: BaseException) -> StorageError:
    """What an h5py error opening ``url`` stands for: the store failed, the file is gone, or it is unreadable."""
    failure = source.failure if isinstance(source, _Reader) else None
    if failure is not None:
        reason = f"reading its metadata failed ({type(failure).__name__})"
        return translate(failure, url) or TransientStorageError(url, reason)
    if isinstance(err, FileNotFoundError):
        return DataNotFound(url, "file does not exist")
    return BadDataError(url, f"not a readable HDF5 file ({err})")


class _Reader(io.RawIOBase):
    """A remote file as h5py reads it, keeping the first failure (h5py reports only a vague OSError)."""

    def __init__(self, handle: Any) -> None:
        super().__init__()
        self._handle = handle
        self.failure: BaseException | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._handle.seek(offset, whence))

    def tell(self) -> int:
        return int(self._handle.tell())

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        try:
            data = self._handle.read(out.nbytes)
        except Exception as err:  # noqa: BLE001 - any failure of the store's client is reported after h5py's
            # Kept without its traceback, and a short read for HDF5: the frames of a traceback
            # hold h5py's file-access list, which holds this reader, a cycle through C that no
            # collection breaks; HDF5 then frees the list at exit, after Python: SIGSEGV.
            self.failure = self.failure or err.with_traceback(None)
            return 0
        out[: len(data)] = data
        return len(data)
