"""storage.new_rows: the prepared new rows of a checkpoint directory, on disk and on S3."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from storage.errors import BadDataError
from storage.layout import NEW_ROWS_FILE
from storage.new_rows import NewRowsFile


def test_saved_rows_load_per_partition_with_their_source(tmp_path: Path) -> None:
    rows = NewRowsFile(str(tmp_path))
    vectors = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))
    rows.save(
        {("user", 1): (torch.tensor([5, 7]), vectors, torch.tensor([1.0, 2.0]))},
        {"init_path": "s3://b/run", "version": 3},
    )
    again = NewRowsFile(str(tmp_path))
    offsets, loaded, sums = again.load_new_rows("user", 1)  # type: ignore[misc]
    assert offsets.tolist() == [5, 7] and sums is not None and sums.tolist() == [1.0, 2.0]
    torch.testing.assert_close(loaded, vectors)
    assert again.load_new_rows("user", 0) is None
    assert again.source() == {"init_path": "s3://b/run", "version": 3}


def test_no_file_means_no_prepared_rows(tmp_path: Path) -> None:
    rows = NewRowsFile(str(tmp_path))
    assert rows.load_new_rows("user", 0) is None and rows.source() is None
    rows.remove()  # idempotent


def test_a_foreign_file_is_named(tmp_path: Path) -> None:
    import h5py

    with h5py.File(tmp_path / NEW_ROWS_FILE, "w") as hf:
        hf.attrs["format_version"] = 1
    with pytest.raises(BadDataError, match=NEW_ROWS_FILE):
        NewRowsFile(str(tmp_path)).load_new_rows("user", 0)


def test_rows_round_trip_on_local_disk_and_s3(store_root: str) -> None:
    rows = NewRowsFile(f"{store_root}/run-1")
    rows.save({("item", 0): (torch.tensor([0]), torch.ones(1, 4), None)}, {"version": 1})
    offsets, vectors, sums = NewRowsFile(f"{store_root}/run-1").load_new_rows("item", 0)  # type: ignore[misc]
    assert offsets.tolist() == [0] and vectors.shape == (1, 4) and sums is None  # sums are optional
