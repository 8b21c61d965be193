"""Tests for storage.edges: PBG edge files, chunking, featurized edges, atomic appends."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest
import torch
from store_io import StorePath, read_h5, write_h5

from pbg_core.edgelist import EdgeList, EntityList, TensorList
from pbg_core.types import Bucket
from storage.edges import EdgeStore, chunk_bounds
from storage.errors import BadDataError, DataNotFound, FormatVersionError

B = Bucket(0, 1)


def _edges(n: int, seed: int = 0, weight: bool = False) -> EdgeList:
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(n, generator=g) * 3 if weight else None
    return EdgeList.from_tensors(
        torch.randint(100, (n,), generator=g),
        torch.randint(100, (n,), generator=g),
        torch.randint(5, (n,), generator=g),
        w,
    )


def _featurized(n: int, seed: int = 0) -> EdgeList:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (n,), generator=g)  # includes empty bags
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    data = torch.randint(50, (int(offsets[-1]),), generator=g)
    lhs = EntityList(torch.zeros(n, dtype=torch.long), TensorList(offsets, data))
    return EdgeList(lhs, EntityList(torch.arange(n)), torch.zeros(n, dtype=torch.long))


def _pbg_file(path: StorePath, **datasets: np.ndarray) -> None:
    """Write an edge file the way PBG does (int64 chunked datasets, format_version attribute)."""
    with write_h5(str(path)) as hf:
        hf.attrs["format_version"] = 1
        for name, data in datasets.items():
            hf.create_dataset(name, data=data, maxshape=(None,), chunks=True)


def test_chunk_bounds_hand_computed() -> None:
    assert [chunk_bounds(10, i, 3) for i in range(3)] == [(0, 4), (4, 8), (8, 10)]
    # N=5 in 4 chunks: cs=2; PBG would compute [6, 5) for the last chunk, we clamp to empty.
    assert [chunk_bounds(5, i, 4) for i in range(4)] == [(0, 2), (2, 4), (4, 5), (5, 5)]
    assert chunk_bounds(0, 0, 1) == (0, 0)


@pytest.mark.parametrize("n", [0, 1, 7, 100, 101])
@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_chunk_bounds_partition_edges_like_pbg(n: int, k: int) -> None:
    cs = math.ceil(n / k)
    bounds = [chunk_bounds(n, i, k) for i in range(k)]
    for i, (begin, end) in enumerate(bounds):
        if i * cs < n:  # where PBG's formula is well defined, it is exactly ours
            assert (begin, end) == (i * cs, min((i + 1) * cs, n))
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))


@pytest.mark.parametrize("args", [(10, 3, 3), (10, -1, 3), (10, 0, 0)])
def test_chunk_bounds_rejects_bad_args(args: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        chunk_bounds(*args)


def test_save_load_round_trip_with_float_weights(root: StorePath) -> None:
    store = EdgeStore(str(root))
    edges = _edges(50, weight=True)
    store.save(B, edges)
    assert store.has_bucket(B) and not store.has_bucket(Bucket(1, 0))
    assert store.num_edges(B) == 50
    loaded = store.load(B)
    assert loaded == edges
    assert loaded.weight is not None and loaded.weight.dtype == torch.float32
    with read_h5(str(root / "edges_0_1.h5")) as hf:
        assert hf.attrs["format_version"] == 1
        assert {k: hf[k].dtype for k in hf} == {"lhs": np.int64, "rhs": np.int64, "rel": np.int64, "weight": np.float32}
        assert hf["rel"].maxshape == (None,)


@pytest.mark.parametrize("k", [1, 3, 7])
def test_load_chunk_matches_slices(root: StorePath, k: int) -> None:
    store = EdgeStore(str(root) if root.is_s3 else f"file://{root}")
    edges = _edges(20, seed=1)
    store.save(B, edges)
    parts = [store.load_chunk(B, i, k) for i in range(k)]
    for i, part in enumerate(parts):
        begin, end = chunk_bounds(20, i, k)
        assert part == edges[begin:end]
    assert EdgeList.cat(parts) == edges


def test_featurized_round_trip_and_chunk_rebasing(root: StorePath) -> None:
    store = EdgeStore(str(root))
    edges = _featurized(30, seed=2)
    store.save(B, edges)
    assert store.load(B) == edges
    for i in range(4):
        begin, end = chunk_bounds(30, i, 4)
        chunk = store.load_chunk(B, i, 4)
        assert chunk.lhs.tensor_list is not None and chunk.rhs.tensor_list is None
        assert int(chunk.lhs.tensor_list.offsets[0]) == 0
        assert chunk == edges[begin:end]


def test_empty_bucket(root: StorePath) -> None:
    store = EdgeStore(str(root))
    store.save(B, _edges(0))
    assert store.num_edges(B) == 0
    assert len(store.load_chunk(B, 0, 2)) == 0
    with store.appender(Bucket(1, 1)):
        pass
    assert store.num_edges(Bucket(1, 1)) == 0


def test_appender_streams_in_several_flushes(root: StorePath) -> None:
    store = EdgeStore(str(root))
    pieces = [_edges(n, seed=n, weight=True) for n in (3, 0, 5, 4)]
    with store.appender(B, chunk_elements=2, buffer_edges=4) as out:
        for piece in pieces:
            out.append(piece)
    assert out.num_edges == 12
    assert store.load(B) == EdgeList.cat(pieces)


def test_appender_featurized_pieces_are_rebased(root: StorePath) -> None:
    store = EdgeStore(str(root))
    whole = _featurized(12, seed=3)
    with store.appender(B, buffer_edges=1) as out:
        out.append(whole[0:5])  # slices of a TensorList keep their own offsets from 0
        out.append(whole[5:12])
    assert store.load(B) == whole


def test_exception_inside_appender_leaves_nothing(root: StorePath) -> None:
    store = EdgeStore(str(root))
    with pytest.raises(RuntimeError), store.appender(B, buffer_edges=1) as out:
        out.append(_edges(10))
        raise RuntimeError("import failed")
    assert list(root.iterdir()) == []
    # And an existing bucket survives a failed rewrite untouched.
    store.save(B, _edges(4, seed=9))
    with pytest.raises(RuntimeError), store.appender(B) as out:
        out.append(_edges(10))
        raise RuntimeError("import failed")
    assert store.load(B) == _edges(4, seed=9)
    assert [p.name for p in root.iterdir()] == ["edges_0_1.h5"]


def test_stale_tmp_file_is_replaced(root: StorePath) -> None:
    (root / "edges_0_1.tmp.h5").write_bytes(b"garbage from a crash")
    store = EdgeStore(str(root))
    assert store.list_buckets() == []
    store.save(B, _edges(3))
    # Locally the temporary name is reused (and so replaced); S3 writes never create one
    # (local file, then one upload), so a foreign leftover stays and is still no bucket.
    leftover = ["edges_0_1.tmp.h5"] if root.is_s3 else []
    assert [p.name for p in root.iterdir()] == ["edges_0_1.h5", *leftover]
    assert store.list_buckets() == [B]
    assert store.load(B) == _edges(3)


def test_appender_rejects_layout_change(root: StorePath) -> None:
    with pytest.raises(ValueError, match="has_weight"), EdgeStore(str(root)).appender(B) as out:
        out.append(_edges(2))
        out.append(_edges(2, weight=True))
    assert list(root.iterdir()) == []


def test_list_buckets(root: StorePath) -> None:
    store = EdgeStore(str(root))
    assert store.list_buckets() == []
    for b in (Bucket(1, 0), Bucket(0, 0), Bucket(0, 10)):
        store.save(b, _edges(1))
    (root / "edges_2_2.tmp.h5").write_bytes(b"")
    assert store.list_buckets() == [Bucket(0, 0), Bucket(0, 10), Bucket(1, 0)]


def test_reads_pbg_file_with_int64_weights(root: StorePath) -> None:
    _pbg_file(
        root / "edges_0_1.h5",
        lhs=np.array([1, 2, 3]),
        rhs=np.array([4, 5, 6]),
        rel=np.array([0, 0, 1]),
        weight=np.array([2, 1, 7]),
    )
    loaded = EdgeStore(str(root)).load(B)
    assert loaded.lhs.tensor.tolist() == [1, 2, 3]
    assert loaded.weight is not None and loaded.weight.dtype == torch.float32
    assert loaded.weight.tolist() == [2.0, 1.0, 7.0]


def test_format_version_error_names_file(root: StorePath) -> None:
    with write_h5(str(root / "edges_0_1.h5")) as hf:
        hf.attrs["format_version"] = 2
        hf.create_dataset("rel", data=np.arange(2))
    with pytest.raises(FormatVersionError, match=r"edges_0_1.h5: found format_version=2, expected format_version=1"):
        EdgeStore(str(root)).num_edges(B)


def test_missing_bucket_and_missing_dataset(root: StorePath) -> None:
    store = EdgeStore(str(root))
    with pytest.raises(DataNotFound, match="edges_0_1.h5"):
        store.load(B)
    _pbg_file(root / "edges_0_1.h5", lhs=np.arange(2), rel=np.arange(2))
    with pytest.raises(BadDataError, match="missing dataset 'rhs'"):
        store.load(B)


def test_unequal_lengths_are_bad_data(root: StorePath) -> None:
    _pbg_file(root / "edges_0_1.h5", lhs=np.arange(3), rhs=np.arange(2), rel=np.arange(3))
    with pytest.raises(BadDataError, match="equal length"):
        EdgeStore(str(root)).load(B)


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        (np.array([0, 1]), "N\\+1 = 3 entries"),
        (np.array([1, 1, 2]), "must start at 0"),
        (np.array([0, 2, 1]), "non-decreasing"),
        (np.array([0, 1, 9]), "points past the end"),
    ],
)
def test_bad_feature_offsets(root: StorePath, offsets: np.ndarray, message: str) -> None:
    _pbg_file(
        root / "edges_0_1.h5",
        lhs=np.zeros(2, dtype=np.int64),
        rhs=np.arange(2),
        rel=np.zeros(2, dtype=np.int64),
        lhsd_offsets=offsets,
        lhsd_data=np.arange(2),
    )
    with pytest.raises(BadDataError, match=message):
        EdgeStore(str(root)).load(B)


def test_remote_filesystem_round_trip() -> None:
    store = EdgeStore(f"memory://pbg-edges-{uuid.uuid4().hex}")
    edges = _edges(9, weight=True)
    store.save(B, edges)
    assert store.list_buckets() == [B]
    assert store.load_chunk(B, 1, 2) == edges[5:9]


def test_load_chunk_into_shared_memory(root: StorePath) -> None:
    store = EdgeStore(str(root))
    edges = _edges(40, seed=3, weight=True)
    store.save(B, edges)
    chunk = store.load_chunk(B, 1, 2, shared=True)
    assert chunk == edges[20:40]
    assert chunk.lhs.tensor.is_shared() and chunk.rel.is_shared() and chunk.weight.is_shared()


def test_stamp_changes_when_the_file_is_replaced(root: StorePath) -> None:
    store = EdgeStore(str(root / "edges"))
    store.save(B, _edges(50, seed=1))
    first = store.stamp(B)
    if root.is_s3:
        assert first is None  # remote: unknown, the engine reads the chunk again
        return
    assert first is not None and first == store.stamp(B)  # unchanged: the same stamp
    store.save(B, _edges(50, seed=2))  # a re-import renames a new file over it
    assert store.stamp(B) != first
    assert store.stamp(Bucket(1, 1)) is None  # no file
