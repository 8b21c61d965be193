"""Tests for storage.hdf5: format-version checks, error translation, byte blobs, ranged reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from store_io import StorePath, read_h5, write_h5

from storage import hdf5
from storage.errors import BadDataError, DataNotFound, FormatVersionError


def test_open_write_sets_format_version_and_commits(root: StorePath) -> None:
    url = str(root / "f.h5")
    with hdf5.open_write(url) as hf:
        hf.create_dataset("x", data=np.arange(3))
    with read_h5(url) as hf:
        assert hf.attrs["format_version"] == 1
    with hdf5.open_read(url if root.is_s3 else f"file://{url}") as hf:
        assert list(hf["x"][...]) == [0, 1, 2]


def test_open_write_failure_leaves_no_file(root: StorePath) -> None:
    with pytest.raises(KeyError), hdf5.open_write(str(root / "f.h5")) as hf:
        hf.create_dataset("x", data=np.arange(3))
        raise KeyError("boom")
    assert list(root.iterdir()) == []


@pytest.mark.parametrize("version", [None, 2])
def test_wrong_format_version_is_rejected(root: StorePath, version: int | None) -> None:
    path = root / "f.h5"
    with write_h5(str(path)) as hf:
        if version is not None:
            hf.attrs["format_version"] = version
    with pytest.raises(FormatVersionError) as info, hdf5.open_read(str(path)):
        pass
    assert info.value.found == version
    assert info.value.expected == 1
    assert str(path) in str(info.value)


def test_missing_and_non_hdf5_files(root: StorePath) -> None:
    with pytest.raises(DataNotFound, match="nope.h5"), hdf5.open_read(str(root / "nope.h5")):
        pass
    (root / "text.h5").write_text("not hdf5")
    with pytest.raises(BadDataError, match="not a readable HDF5 file"), hdf5.open_read(str(root / "text.h5")):
        pass


def test_bytes_round_trip_as_v1_void(root: StorePath) -> None:
    payload = bytes(range(256)) + b"\x00tail"
    url = str(root / "f.h5")
    with hdf5.open_write(url) as hf:
        hdf5.write_bytes(hf, "optimizer/state_dict", payload)
    with hdf5.open_read(url) as hf:
        assert hf["optimizer/state_dict"].dtype == np.dtype("V1")
        assert hdf5.read_bytes(hf, "optimizer/state_dict") == payload
        assert hdf5.read_bytes(hf, "absent") is None


def test_read_1d_ranges_and_conversion(root: StorePath) -> None:
    url = str(root / "f.h5")
    with hdf5.open_write(url) as hf:
        hf.create_dataset("i", data=np.arange(10, dtype=np.int64))
        hf.create_dataset("w", data=np.array([1, 2, 3], dtype=np.int64))
    with hdf5.open_read(url) as hf:
        assert torch.equal(hdf5.read_1d(hf["i"], 3, 6, torch.long), torch.tensor([3, 4, 5]))
        assert hdf5.read_1d(hf["i"], 4, 4, torch.long).shape == (0,)
        w = hdf5.read_1d(hf["w"], 0, 3, torch.float32)
        assert w.dtype == torch.float32 and w.tolist() == [1.0, 2.0, 3.0]


def test_require_dataset_names_missing_and_present(root: StorePath) -> None:
    url = str(root / "f.h5")
    with hdf5.open_write(url) as hf:
        hf.create_dataset("lhs", data=np.arange(2))
    with hdf5.open_read(url) as hf, pytest.raises(BadDataError, match=r"missing dataset 'rel'; found \['lhs'\]"):
        hdf5.require_dataset(hf, "rel", url)


def test_attrs_with_slashes_round_trip(root: StorePath) -> None:
    url = str(root / "f.h5")
    with hdf5.open_write(url) as hf:
        hdf5.write_attrs(hf, {"config/json": '{"a": 1}', "iteration/epoch_idx": 3})
    with hdf5.open_read(url) as hf:
        assert hdf5.read_attrs(hf) == {"format_version": 1, "config/json": '{"a": 1}', "iteration/epoch_idx": 3}


# Runs in a child process: a hang there fails the test by its timeout instead of hanging the run.
_COLLECTION_PROBE = """
import gc, sys
import h5py
from storage.checkpoint_names import _open_attrs
from storage.importing.edge_paths import edges_on_disk
from storage.version_check import _read_header

url, local = sys.argv[1], sys.argv[2]


def attrs():
    with _open_attrs(url + "/edges_0_0.h5", None) as hf:
        return hf.attrs["format_version"]


reads = {
    "version_check": lambda: _read_header(url + "/edges_0_0.h5", None, lambda hf, u: hf["lhs"].shape),
    "checkpoint_names": attrs,
    "edge_paths": lambda: edges_on_disk(url),
}
read = reads[sys.argv[3]]
read()  # the client's start-up, outside the loop
for threshold in range(5, 600, 5):
    gc.collect()
    gc.set_threshold(threshold, 10, 10)
    # Fresh cyclic garbage holding open h5py objects: the next collection frees them, in
    # whichever thread allocates enough to start it (often fsspec's, mid-read).
    f = h5py.File(local, "r"); d = f["x"]; cycle = [f, d]; cycle.append(cycle); del f, d, cycle
    read()
print("done")
"""


@pytest.mark.slow  # ~20 s per reader: 120 remote reads, each after fresh garbage
@pytest.mark.parametrize("reader", ["version_check", "checkpoint_names", "edge_paths"])
def test_a_remote_read_by_ranges_survives_a_collection_in_fsspecs_thread(
    reader: str, s3_bucket: str, tmp_path: Path
) -> None:
    """h5py holds its lock while it reads through an s3fs file, which waits for fsspec's thread;
    a collection there that frees an h5py object waited for that lock forever (a CI run hung)."""
    url = f"s3://{s3_bucket}/edges"
    with hdf5.open_write(f"{url}/edges_0_0.h5") as hf:
        hf.create_dataset("lhs", data=np.arange(1000))
    local = tmp_path / "garbage.h5"
    with h5py.File(local, "w") as hf:
        hf.create_dataset("x", data=[1])
    done = subprocess.run(
        [sys.executable, "-c", _COLLECTION_PROBE, url, str(local), reader],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "done"
