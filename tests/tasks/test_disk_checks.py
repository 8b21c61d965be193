"""tasks.disk_checks: a step that would fill the checkpoint's disk fails before writing, v stays loadable.

A real session trains the planted graph (d=400: 321 KB of embeddings a version) with its
checkpoint on a real 2 MiB filesystem (a tmpfs; skipped where mounting is not permitted), then
a ballast file leaves less room than the next write needs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pbg_core.config import parse_config
from pbg_core.ports import FINAL
from pbg_core.session.memory_plan import row_bytes
from storage.checkpoints import CheckpointStore
from storage.disk_space import NoSpaceForCheckpoint, version_bytes_on_disk
from tasks.buckets import finish_bucket, load_edges, schedule_buckets, swap_partitions, train_bucket
from tasks.checkpoint import switch_version, write_checkpoint
from tasks.disk_checks import FILE_SLACK, completion_bytes
from tasks.plan import plan_training
from tasks.runs import open_run
from tasks.sessions import close_training_session, get_session, open_training_session


def fill(disk: Path, leave: int) -> None:
    """Write a ballast file so that about ``leave`` bytes stay free."""
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    (disk / "ballast").write_bytes(b"\0" * max(0, free - leave))


@pytest.fixture
def committed_v1(graph: Any, config_for: Any, small_disk: Callable[[int], Path], train_buckets: Any) -> Iterator[Any]:
    """A session whose checkpoint on a 2 MiB disk has version 1 committed; (handle, second iteration, ckpt)."""
    disk = small_disk(2 << 20)
    config = parse_config(config_for(graph, disk / "ckpt", num_epochs=2, dimension=400))
    handle = open_training_session.fn(open_run(config))
    first, second = plan_training.fn(open_run(config)).remaining[:2]
    train_buckets(handle, first)
    write_checkpoint.fn(handle, first)
    switch_version.fn(handle, first)
    yield handle, second, disk
    close_training_session.fn(handle)


def assert_v1_loadable(checkpoint: Path, before: Any) -> None:
    store = CheckpointStore(str(checkpoint))
    assert store.read_version() == 1
    assert store.load_embeddings("node", 0, 1)[0].equal(before)


def test_a_bucket_save_without_room_fails_before_writing(committed_v1: Any) -> None:
    handle, second, disk = committed_v1
    v1 = CheckpointStore(str(disk / "ckpt")).load_embeddings("node", 0, 1)[0]
    (bucket,) = schedule_buckets.fn(handle, second)
    swap_partitions.fn(handle, bucket)
    load_edges.fn(handle, bucket)
    train_bucket.fn(handle)
    fill(disk, 100_000)  # the trained partition alone is 321 KB
    with pytest.raises(NoSpaceForCheckpoint) as caught:
        finish_bucket.fn(handle)
    message = str(caught.value)
    assert message.startswith(f"{disk / 'ckpt'}: not enough disk space for the bucket progress of version 2: ")
    assert "the committed version 1 is intact" in message and "\n" not in message
    assert not list((disk / "ckpt").glob("*.v2.h5"))  # nothing was written
    assert_v1_loadable(disk / "ckpt", v1)


def test_a_checkpoint_without_room_fails_before_writing(committed_v1: Any, train_buckets: Any) -> None:
    handle, second, disk = committed_v1
    v1 = CheckpointStore(str(disk / "ckpt")).load_embeddings("node", 0, 1)[0]
    train_buckets(handle, second)  # the only bucket is the last: it saved to the v2 names already
    model_files = set((disk / "ckpt").glob("model.v2.h5"))
    fill(disk, 8192)  # less than the model's file
    with pytest.raises(NoSpaceForCheckpoint, match="not enough disk space for checkpoint version 2: .* version 1 is"):
        write_checkpoint.fn(handle, second)
    assert set((disk / "ckpt").glob("model.v2.h5")) == model_files
    assert_v1_loadable(disk / "ckpt", v1)
    (disk / "ballast").unlink()  # room again: the retried step completes and commits
    assert write_checkpoint.fn(handle, second) == 2
    assert switch_version.fn(handle, second) == 2


def test_partitions_promoted_by_a_link_need_no_room(
    graph_4x4: Any, config_for: Any, small_disk: Callable[[int], Path], train_buckets: Any
) -> None:
    # progress_interval 0: every bucket saves into its progress area; write-checkpoint then links
    # the partitions the last bucket did not touch into version 1's names instead of writing them.
    disk = small_disk(8 << 20)
    config = parse_config(config_for(graph_4x4, disk / "ckpt", num_epochs=1, dimension=400, progress_interval=0))
    handle = open_training_session.fn(open_run(config))
    try:
        (first,) = plan_training.fn(open_run(config)).remaining
        train_buckets(handle, first)
        session = get_session(handle)
        promoted = session.residency.promoted_keys()
        assert promoted and all(session.residency.locations[key] != FINAL for key in promoted)
        promoted_bytes = sum(session.residency.counts[key] * row_bytes(400) + FILE_SLACK for key in promoted)
        needed = completion_bytes(session, config) - version_bytes_on_disk(config.checkpoint_path, 1)
        # The model and the last bucket's partitions are on disk already: only slack is left to
        # find room for. Counting the promoted partitions too would ask for more than is left.
        room = 4 * FILE_SLACK
        assert needed <= room < needed + promoted_bytes
        fill(disk, room)
        assert write_checkpoint.fn(handle, first) == 1
        assert switch_version.fn(handle, first) == 1
        linked = [disk / "ckpt" / f"embeddings_{entity}_{part}.v1.h5" for entity, part in promoted]
        assert all(path.exists() for path in linked)
        assert CheckpointStore(str(disk / "ckpt")).read_version() == 1
    finally:
        close_training_session.fn(handle)
