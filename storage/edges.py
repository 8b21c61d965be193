"""Bucketed edge files of one edge path (PBG's ``FileEdgeStorage``; docs/formats.md, "Edge files").

One HDF5 file per bucket, ``edges_{lhs_part}_{rhs_part}.h5``, root attribute
``format_version = 1``, 1-D datasets of equal length N:

- ``lhs``, ``rhs``, ``rel``: int64 entity offsets and relation index;
- ``weight`` (optional): float32. PBG writes and reads weights as int64, truncating
  fractional weights; we write float32 and convert int64 weights of PBG files on load;
- ``lhsd_offsets``/``lhsd_data`` and ``rhsd_offsets``/``rhsd_data`` (optional, int64)
  for featurized entities: edge i's features are ``data[offsets[i]:offsets[i+1]]``,
  ``offsets`` has N+1 entries, starts at 0 and never decreases.

Files are written under ``edges_{l}_{r}.tmp.h5`` and renamed only when complete (on S3:
written locally and uploaded once), so a crashed import never leaves a half-written bucket
under the real name. Reads from S3 go through the local read cache (:func:`storage.fs.reads.local_read_path`). Datasets are
chunked and resizable (``maxshape=None``) like PBG's, so an importer can stream into
them with :meth:`EdgeStore.appender`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

import h5py
import numpy as np
import torch

from pbg_core.edgelist import EdgeList, EntityList, TensorList
from pbg_core.types import Bucket, Side
from storage import hdf5, layout
from storage.errors import BadDataError
from storage.fs import reads, urls
from storage.fs.urls import StorageOptions

ID_DATASETS = ("lhs", "rhs", "rel")
WEIGHT_DATASET = "weight"
FEATURE_PREFIX = {Side.LHS: "lhsd", Side.RHS: "rhsd"}

# HDF5 chunk size in elements (2 MiB of int64). PBG uses 6,553,600 but HDF5 allocates
# whole chunks, which would make every tiny bucket file ~50 MiB per dataset.
DEFAULT_CHUNK_ELEMENTS = 1 << 18
# Appends are buffered up to this many edges before touching the file.
DEFAULT_BUFFER_EDGES = 1 << 20


def chunk_bounds(num_edges: int, chunk_idx: int, num_chunks: int) -> tuple[int, int]:
    """PBG's contiguous split of N edges: ``[i*cs, min((i+1)*cs, N))`` with ``cs = ceil(N/num_chunks)``.

    Trailing chunks may be empty (e.g. N=5 in 4 chunks: sizes 2, 2, 1, 0); their start
    is clamped to N where PBG would compute a negative length.

    Raises:
        ValueError: ``num_chunks < 1`` or ``chunk_idx`` outside ``[0, num_chunks)``.
    """
    if num_chunks < 1:
        raise ValueError(f"num_chunks must be >= 1, got {num_chunks}")
    if not 0 <= chunk_idx < num_chunks:
        raise ValueError(f"chunk_idx must be in [0, {num_chunks}), got {chunk_idx}")
    size = math.ceil(num_edges / num_chunks)
    begin = min(chunk_idx * size, num_edges)
    return begin, min(begin + size, num_edges)


class EdgeStore:
    """The edge files of one edge path.

    Args:
        url: The edge-path directory (local path, ``file://`` or other fsspec URL).
        storage_options: Filesystem keyword arguments.
    """

    def __init__(self, url: str, storage_options: StorageOptions = None) -> None:
        self.url = url
        self.storage_options = storage_options

    def bucket_url(self, bucket: Bucket) -> str:
        """URL of the file of ``bucket``."""
        return urls.join_url(self.url, layout.edge_file(bucket.lhs, bucket.rhs))

    def has_bucket(self, bucket: Bucket) -> bool:
        """Whether the file of ``bucket`` exists."""
        return reads.exists(self.bucket_url(bucket), self.storage_options)

    def list_buckets(self) -> list[Bucket]:
        """Buckets with a committed edge file, sorted (temporary files are ignored)."""
        names = reads.listdir(self.url, self.storage_options)
        return sorted(b for b in map(layout.parse_edge_file, names) if b is not None)

    def num_edges(self, bucket: Bucket) -> int:
        """Edges in ``bucket`` (length of its ``rel`` dataset, as PBG)."""
        url = self.bucket_url(bucket)
        with hdf5.open_read(url, self.storage_options) as hf:
            return len(hdf5.require_dataset(hf, "rel", url))

    def stamp(self, bucket: Bucket) -> tuple[int, int, int, int] | None:
        """The bucket file's identity on local disk: (inode, size, mtime and ctime in ns).

        An import replaces a file by renaming a new one over it, so the stamp changes
        whenever the content may have. None for remote storage (reads there go through
        the read cache, which checks the object's version itself) and for a missing file.
        """
        filesystem, path = urls.resolve(self.bucket_url(bucket), self.storage_options)
        if not urls.is_local(filesystem):
            return None
        try:
            info = os.stat(path)
        except OSError:
            return None
        return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def load(self, bucket: Bucket) -> EdgeList:
        """All edges of ``bucket``."""
        return self.load_chunk(bucket, 0, 1)

    def load_chunk(self, bucket: Bucket, chunk_idx: int, num_chunks: int, shared: bool = False) -> EdgeList:
        """Chunk ``chunk_idx`` of ``num_chunks`` of ``bucket`` (see :func:`chunk_bounds`).

        ``shared=True`` reads the id columns and weights straight into shared memory.

        Raises:
            DataNotFound: the bucket file is missing.
            FormatVersionError: the file's ``format_version`` is not 1.
            BadDataError: a dataset is missing, lengths differ or offsets are invalid.
        """
        url = self.bucket_url(bucket)
        with hdf5.open_read(url, self.storage_options) as hf:
            n = _validated_length(hf, url)
            begin, end = chunk_bounds(n, chunk_idx, num_chunks)
            lhs, rhs, rel = (hdf5.read_1d(hf[name], begin, end, torch.long, shared) for name in ID_DATASETS)
            weight = None
            if WEIGHT_DATASET in hf:
                weight = hdf5.read_1d(hf[WEIGHT_DATASET], begin, end, torch.float32, shared)
            lhs_feats = _read_features(hf, Side.LHS, begin, end, n, url)
            rhs_feats = _read_features(hf, Side.RHS, begin, end, n, url)
        return EdgeList(EntityList(lhs, lhs_feats), EntityList(rhs, rhs_feats), rel, weight)

    def save(self, bucket: Bucket, edges: EdgeList) -> None:
        """Write ``edges`` as the whole content of ``bucket``, atomically."""
        chunk = max(1, min(len(edges), DEFAULT_CHUNK_ELEMENTS))
        with self.appender(bucket, chunk_elements=chunk) as out:
            out.append(edges)

    @contextlib.contextmanager
    def appender(
        self,
        bucket: Bucket,
        chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
        buffer_edges: int = DEFAULT_BUFFER_EDGES,
    ) -> Iterator[EdgeAppender]:
        """Stream edges into ``bucket``; the file appears only if the block exits cleanly.

        A stale ``edges_{l}_{r}.tmp.h5`` from a crashed run is deleted first. If the
        block raises, the temporary file is removed and any previous
        ``edges_{l}_{r}.h5`` is left as it was.

        Yields:
            An :class:`EdgeAppender`; call ``append(edges)`` any number of times.
        """
        url = self.bucket_url(bucket)
        with hdf5.open_write(url, self.storage_options) as hf:
            out = EdgeAppender(hf, chunk_elements, buffer_edges)
            yield out
            out.close()


class EdgeAppender:
    """Appends edge lists to an open edge file through a buffer.

    The first appended list fixes which optional datasets exist (weight, features
    per side); later lists must match.

    Args:
        hf: The (temporary) file, already carrying ``format_version``.
        chunk_elements: HDF5 chunk size of every dataset.
        buffer_edges: Buffered edges that trigger a write.
    """

    def __init__(self, hf: h5py.File, chunk_elements: int, buffer_edges: int) -> None:
        self._hf = hf
        self._chunk = chunk_elements
        self._buffer_edges = buffer_edges
        self._pending: list[EdgeList] = []
        self._pending_len = 0
        self._schema: tuple[bool, bool, bool] | None = None
        self.num_edges = 0

    def append(self, edges: EdgeList) -> None:
        """Add ``edges`` at the end of the file.

        Raises:
            ValueError: ``edges`` has a weight or features when the first list had not, or vice versa.
        """
        schema = _schema_of(edges)
        if self._schema is None:
            self._schema = schema
            self._create_datasets(schema)
        elif schema != self._schema:
            raise ValueError(
                "appended edges must keep the layout of the first append "
                f"(has_weight, lhs_featurized, rhs_featurized) = {self._schema}, got {schema}"
            )
        self._pending.append(edges)
        self._pending_len += len(edges)
        if self._pending_len >= self._buffer_edges:
            self.flush()

    def flush(self) -> None:
        """Write the buffered edges to the file."""
        if not self._pending:
            return
        edges = self._pending[0] if len(self._pending) == 1 else EdgeList.cat(self._pending)
        self._pending, self._pending_len = [], 0
        _extend(self._hf["lhs"], edges.lhs.tensor)
        _extend(self._hf["rhs"], edges.rhs.tensor)
        _extend(self._hf["rel"], edges.rel)
        if edges.weight is not None:
            _extend(self._hf[WEIGHT_DATASET], edges.weight.to(torch.float32))
        for side, entities in ((Side.LHS, edges.lhs), (Side.RHS, edges.rhs)):
            if entities.tensor_list is not None:
                self._extend_features(FEATURE_PREFIX[side], entities.tensor_list)
        self.num_edges += len(edges)

    def close(self) -> None:
        """Flush, and create the id datasets if nothing was ever appended (empty bucket)."""
        if self._schema is None:
            self._schema = (False, False, False)
            self._create_datasets(self._schema)
        self.flush()

    def _create_datasets(self, schema: tuple[bool, bool, bool]) -> None:
        has_weight, lhs_feats, rhs_feats = schema
        for name in ID_DATASETS:
            self._create(name, np.int64)
        if has_weight:
            self._create(WEIGHT_DATASET, np.float32)
        for prefix, featurized in (("lhsd", lhs_feats), ("rhsd", rhs_feats)):
            if featurized:
                self._create(f"{prefix}_offsets", np.int64)
                self._create(f"{prefix}_data", np.int64)
                _extend(self._hf[f"{prefix}_offsets"], torch.zeros(1, dtype=torch.long))

    def _create(self, name: str, dtype: type) -> None:
        self._hf.create_dataset(name, shape=(0,), maxshape=(None,), chunks=(self._chunk,), dtype=dtype)

    def _extend_features(self, prefix: str, features: TensorList) -> None:
        offsets_ds, data_ds = self._hf[f"{prefix}_offsets"], self._hf[f"{prefix}_data"]
        base = int(data_ds.shape[0])
        offsets = features.offsets.to(torch.long)
        # Rebase: the list's offsets start at its own offsets[0], the file's at the data written so far.
        _extend(offsets_ds, offsets[1:] - offsets[0] + base)
        _extend(data_ds, features.data[int(offsets[0]) : int(offsets[-1])].to(torch.long))


def _schema_of(edges: EdgeList) -> tuple[bool, bool, bool]:
    return (edges.weight is not None, edges.lhs.tensor_list is not None, edges.rhs.tensor_list is not None)


def _extend(ds: h5py.Dataset, values: torch.Tensor) -> None:
    """Append a 1-D tensor at the end of a resizable dataset."""
    array = values.detach().cpu().contiguous().numpy()
    if array.size == 0:
        return
    start = ds.shape[0]
    ds.resize((start + array.size,))
    ds[start:] = array


def _validated_length(hf: h5py.File, url: str) -> int:
    """N, after checking that lhs, rhs, rel (and weight) exist, are 1-D and equally long."""
    lengths = {name: hdf5.require_dataset(hf, name, url).shape for name in ID_DATASETS}
    if WEIGHT_DATASET in hf:
        lengths[WEIGHT_DATASET] = hdf5.require_dataset(hf, WEIGHT_DATASET, url).shape
    if any(len(shape) != 1 for shape in lengths.values()) or len(set(lengths.values())) != 1:
        raise BadDataError(url, f"datasets must be 1-D and of equal length, got shapes {lengths}")
    return int(lengths["rel"][0])


def _read_features(hf: h5py.File, side: Side, begin: int, end: int, n: int, url: str) -> TensorList | None:
    """Features of edges ``[begin, end)`` on ``side``, with offsets rebased to 0; None if not featurized."""
    prefix = FEATURE_PREFIX[side]
    names = (f"{prefix}_offsets", f"{prefix}_data")
    if not any(name in hf for name in names):
        return None
    offsets_ds, data_ds = (hdf5.require_dataset(hf, name, url) for name in names)
    if offsets_ds.shape != (n + 1,):
        raise BadDataError(url, f"{names[0]} must have N+1 = {n + 1} entries, got shape {offsets_ds.shape}")
    if int(offsets_ds[0]) != 0:
        raise BadDataError(url, f"{names[0]} must start at 0, got {int(offsets_ds[0])}")
    offsets = hdf5.read_1d(offsets_ds, begin, end + 1, torch.long)
    if bool((offsets[1:] < offsets[:-1]).any()):
        raise BadDataError(url, f"{names[0]} must be non-decreasing (edges {begin}..{end})")
    data_begin, data_end = int(offsets[0]), int(offsets[-1])
    if data_end > data_ds.shape[0]:
        raise BadDataError(url, f"{names[0]} points past the end of {names[1]} ({data_end} > {data_ds.shape[0]})")
    data = hdf5.read_1d(data_ds, data_begin, data_end, torch.long)
    return TensorList(offsets - data_begin, data)
