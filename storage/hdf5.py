"""HDF5 helpers shared by the edge and checkpoint stores.

Every HDF5 file of the PBG layout carries the root attribute ``format_version = 1``;
:func:`open_read` refuses any other value and :func:`open_write` always sets it.
h5py and OS errors are translated into :mod:`storage.errors` here, so callers see
the URL and a plain explanation instead of an HDF5 error stack.

Opaque byte blobs (serialized optimizer state) are stored PBG's way: a 1-D dataset
of numpy ``V1`` (one-byte void) elements.

A remote file opened by h5py through a Python file object (the metadata of big files read by
ranges) must be read under :func:`collection_paused`: see there.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import h5py
import numpy as np

from storage.errors import BadDataError, FormatVersionError
from storage.fs.atomic import local_write
from storage.fs.reads import local_read_path
from storage.fs.urls import StorageOptions

if TYPE_CHECKING:
    import torch

FORMAT_VERSION_ATTR = "format_version"
FORMAT_VERSION = 1

_VOID_DTYPE = np.dtype("V1")


class _CollectionPause:
    """Python's cyclic garbage collection off while any thread is inside :func:`collection_paused`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._was_enabled = False

    def enter(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._holders += 1

    def leave(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._was_enabled:
                gc.enable()


_PAUSE = _CollectionPause()


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collection (in every thread) for the block; nestable, thread-safe.

    Why: h5py holds its global lock while it calls a Python file object's ``read``; an s3fs
    file's read waits for fsspec's event-loop thread, and when an allocation there starts a
    collection that frees an h5py object, that object's finalizer waits for the same lock: both
    threads wait forever (a test on S3 hung 600 s in CI). Without collections in the block, no
    h5py object is finalized in another thread; garbage made meanwhile is collected afterwards.
    """
    _PAUSE.enter()
    try:
        yield
    finally:
        _PAUSE.leave()


@contextlib.contextmanager
def open_read(url: str, storage_options: StorageOptions = None) -> Iterator[h5py.File]:
    """Open the HDF5 file at ``url`` read-only after checking its format version.

    Raises:
        DataNotFound: no file at ``url``.
        BadDataError: the file is not HDF5.
        FormatVersionError: ``format_version`` is missing or not 1.
    """
    with local_read_path(url, storage_options) as local:
        try:
            hf = h5py.File(local, "r")
        except OSError as err:
            raise BadDataError(url, f"not a readable HDF5 file ({err})") from None
        with hf:
            check_format_version(hf, url)
            yield hf


@contextlib.contextmanager
def open_write(url: str, storage_options: StorageOptions = None, tmp_name: str | None = None) -> Iterator[h5py.File]:
    """Create a new HDF5 file that replaces ``url`` atomically when the block exits cleanly.

    The file is written under a temporary name (see :func:`storage.fs.atomic.local_write`)
    with ``format_version = 1`` already set; if the block raises, no file appears
    at ``url`` and a previous one is left untouched.
    """
    with local_write(url, storage_options, tmp_name=tmp_name) as local, h5py.File(local, "w") as hf:
        hf.attrs[FORMAT_VERSION_ATTR] = FORMAT_VERSION
        yield hf


def check_format_version(hf: h5py.File, url: str) -> None:
    """Raise :class:`FormatVersionError` unless ``hf`` has ``format_version == 1``."""
    found = hf.attrs.get(FORMAT_VERSION_ATTR)
    if found is None or not np.isscalar(found) or found != FORMAT_VERSION:
        raise FormatVersionError(url, found.item() if isinstance(found, np.generic) else found, FORMAT_VERSION)


def require_dataset(hf: h5py.File | h5py.Group, name: str, url: str) -> h5py.Dataset:
    """The dataset ``name`` of ``hf``.

    Raises:
        BadDataError: naming the missing dataset and the ones present.
    """
    obj = hf.get(name)
    if not isinstance(obj, h5py.Dataset):
        present = sorted(hf.keys())
        raise BadDataError(url, f"missing dataset {name!r}; found {present}")
    return obj


def read_1d(ds: h5py.Dataset, start: int, stop: int, dtype: torch.dtype, shared: bool = False) -> torch.Tensor:
    """Elements ``[start, stop)`` of a 1-D dataset, read straight into a new tensor.

    Reads with ``read_direct`` (no intermediate copy) when the stored dtype matches
    ``dtype``; other dtypes (e.g. PBG's int64 weights read as float32) go through
    numpy's conversion. ``shared=True`` reads into shared memory (for HOGWILD workers)
    without a private copy first.
    """
    import torch  # here, not at the top: the importer writes HDF5 without torch

    from pbg_core.parallel.memory import shared_empty

    length = max(stop - start, 0)
    out = shared_empty((length,), dtype) if shared else torch.empty(length, dtype=dtype)
    if stop <= start:
        # h5py cannot read_direct an empty selection (h5py issue #870).
        return out
    target = out.numpy()
    if ds.dtype == target.dtype:
        ds.read_direct(target, source_sel=np.s_[start:stop])
    else:
        target[...] = ds[start:stop]
    return out


def write_bytes(hf: h5py.File | h5py.Group, name: str, data: bytes) -> None:
    """Store ``data`` as a 1-D dataset of ``V1`` elements (PBG's optimizer-state encoding)."""
    hf.create_dataset(name, data=np.frombuffer(data, dtype=_VOID_DTYPE))


def read_bytes(hf: h5py.File | h5py.Group, name: str) -> bytes | None:
    """The bytes stored by :func:`write_bytes` under ``name``, or None if absent."""
    ds = hf.get(name)
    if ds is None:
        return None
    return bytes(ds[...].tobytes())


def write_attrs(hf: h5py.File, attrs: Mapping[str, int | str]) -> None:
    """Set root attributes (names may contain ``/``, as PBG's ``iteration/epoch_idx``)."""
    for key, value in attrs.items():
        hf.attrs[key] = value


def read_attrs(hf: h5py.File) -> dict[str, int | str | float]:
    """All root attributes as plain Python values (numpy scalars and bytes unwrapped)."""
    out: dict[str, int | str | float] = {}
    for key, value in hf.attrs.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        out[key] = value
    return out
