"""storage.disk_space: free space of a local checkpoint's filesystem, checked before a write."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from storage.disk_space import (
    NoSpaceForCheckpoint,
    check_disk_space,
    free_bytes,
    nearest_existing_dir,
    version_bytes_on_disk,
)


def test_nearest_existing_dir(tmp_path: Path) -> None:
    assert nearest_existing_dir(str(tmp_path / "a" / "b" / "ckpt")) == str(tmp_path)
    (tmp_path / "a").mkdir()
    assert nearest_existing_dir(str(tmp_path / "a" / "b")) == str(tmp_path / "a")
    assert nearest_existing_dir(str(tmp_path)) == str(tmp_path)


def test_a_small_disk_refuses_more_than_it_has(small_disk: Callable[[int], Path]) -> None:
    disk = small_disk(1 << 20)
    assert 0 < free_bytes(str(disk / "ckpt")) <= 1 << 20
    check_disk_space(str(disk / "ckpt"), 512 * 1024, 3, "checkpoint version 4")  # fits: no error
    with pytest.raises(NoSpaceForCheckpoint) as caught:
        check_disk_space(str(disk / "ckpt"), 2 << 20, 3, "checkpoint version 4")
    message = str(caught.value)
    assert message.startswith(f"{disk / 'ckpt'}: not enough disk space for checkpoint version 4: 2097152 bytes")
    assert f"free on the filesystem of {disk}; the committed version 3 is intact" in message
    assert "\n" not in message


def test_more_than_any_disk_has(tmp_path: Path) -> None:
    with pytest.raises(NoSpaceForCheckpoint, match="no version is committed yet, so nothing is lost"):
        check_disk_space(str(tmp_path / "ckpt"), 10**18, 0, "checkpoint version 1")


def test_object_stores_are_not_checked() -> None:
    check_disk_space("s3://bucket/ckpt", 10**18, 2, "checkpoint version 3")


def test_version_bytes_on_disk_counts_that_version_only(tmp_path: Path) -> None:
    (tmp_path / "embeddings_user_0.v3.h5").write_bytes(b"x" * 100)
    (tmp_path / "model.v3.h5").write_bytes(b"x" * 10)
    (tmp_path / "embeddings_user_0.v2.h5").write_bytes(b"x" * 1000)
    (tmp_path / "checkpoint_version.txt").write_text("2\n")
    assert version_bytes_on_disk(str(tmp_path), 3) == 110
    assert version_bytes_on_disk(str(tmp_path / "absent"), 3) == 0
    assert version_bytes_on_disk("s3://bucket/ckpt", 3) == 0


def test_a_file_linked_to_a_progress_save_takes_no_room_of_its_own(tmp_path: Path) -> None:
    area = tmp_path / "progress" / "v3-b5"
    area.mkdir(parents=True)
    (area / "embeddings_user_1.v3.h5").write_bytes(b"x" * 500)
    os.link(area / "embeddings_user_1.v3.h5", tmp_path / "embeddings_user_1.v3.h5")  # a promoted save
    (tmp_path / "embeddings_user_0.v3.h5").write_bytes(b"x" * 100)
    assert version_bytes_on_disk(str(tmp_path), 3) == 100
