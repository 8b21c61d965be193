"""storage.disk_checks: a step that would fill the checkpoint's disk fails before writing, v stays
loadable and the directory byte-identical; with exactly the room a step asks for, it succeeds, and
asks for less than twice what it adds (+ 1 MiB).

A real session trains the planted graph (d=400: 321 KB of embeddings a version) with its
checkpoint on a real small filesystem (a tmpfs; skipped where mounting is not permitted), and a
ballast file leaves the room each case needs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from disk_state import changes, tree_state

from pbg_core.config import parse_config
from pbg_core.ports import FINAL
from storage.checkpoints import CheckpointStore
from storage.disk_checks import completion_bytes, dirty_bytes, partition_bytes
from storage.disk_space import NoSpaceForCheckpoint, version_files_bytes
from tasks.buckets import finish_bucket, load_edges, schedule_buckets, swap_partitions, train_bucket
from tasks.checkpoint import preserve_version, switch_version, write_checkpoint
from tasks.plan import plan_training
from tasks.runs import open_run
from tasks.sessions import close_training_session, get_session, open_training_session, session_run


def free(disk: Path) -> int:
    return os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize


def fill(disk: Path, leave: int) -> None:
    """Write a ballast file so that ``leave`` bytes stay free (rounded up to a page: the tmpfs counts pages)."""
    (disk / "ballast").unlink(missing_ok=True)
    (disk / "ballast").write_bytes(b"\0" * (max(0, free(disk) - leave) // 4096 * 4096))
    assert leave <= free(disk) < leave + 4096


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
    before = tree_state(disk / "ckpt")
    with pytest.raises(NoSpaceForCheckpoint) as caught:
        finish_bucket.fn(handle)
    assert changes(before, tree_state(disk / "ckpt")) == []
    message = str(caught.value)
    assert message.startswith(f"{disk / 'ckpt'}: not enough disk space for the bucket progress of version 2: ")
    assert "the committed version 1 is intact" in message and "\n" not in message
    assert not list((disk / "ckpt").glob("*.v2.h5"))  # nothing was written
    assert_v1_loadable(disk / "ckpt", v1)
    needed = dirty_bytes(get_session(handle), str(disk / "ckpt"))
    fill(disk, needed)  # exactly the room the check asks for: the save fits, and it is not absurdly more
    finish_bucket.fn(handle)
    added = needed - free(disk)
    assert 0 < added <= needed < 2 * added + (1 << 20)


def test_a_checkpoint_without_room_fails_before_writing(committed_v1: Any, train_buckets: Any) -> None:
    handle, second, disk = committed_v1
    v1 = CheckpointStore(str(disk / "ckpt")).load_embeddings("node", 0, 1)[0]
    train_buckets(handle, second)  # the only bucket is the last: it saved to the v2 names already
    needed = completion_bytes(get_session(handle), session_run(handle).config)  # training_stats.json rewritten
    fill(disk, needed - 4096)
    before = tree_state(disk / "ckpt")
    with pytest.raises(NoSpaceForCheckpoint, match="not enough disk space for checkpoint version 2: .* version 1 is"):
        write_checkpoint.fn(handle, second)
    assert changes(before, tree_state(disk / "ckpt")) == []
    assert_v1_loadable(disk / "ckpt", v1)
    fill(disk, needed)  # room again: the retried step completes and commits
    assert write_checkpoint.fn(handle, second) == 2  # (a rewrite's net addition may be 0: its old file goes)
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
        needed = completion_bytes(session, config)
        # The model and the last bucket's partitions are on disk already, the promoted ones are linked:
        # what is left fits in this room; counting the promoted partitions too would ask for more.
        assert needed + partition_bytes(session, promoted) > needed + 4 * 400 * 50
        fill(disk, needed)
        assert write_checkpoint.fn(handle, first) == 1
        assert switch_version.fn(handle, first) == 1
        linked = [disk / "ckpt" / f"embeddings_{entity}_{part}.v1.h5" for entity, part in promoted]
        assert all(path.exists() for path in linked)
        assert CheckpointStore(str(disk / "ckpt")).read_version() == 1
    finally:
        close_training_session.fn(handle)


def test_a_snapshot_without_room_fails_before_copying(
    graph: Any, config_for: Any, small_disk: Callable[[int], Path], train_buckets: Any
) -> None:
    disk = small_disk(2 << 20)
    raw = config_for(graph, disk / "ckpt", num_epochs=1, dimension=400, checkpoint_preservation_interval=1)
    config = parse_config(raw)
    handle = open_training_session.fn(open_run(config))
    try:
        (first,) = plan_training.fn(open_run(config)).remaining
        train_buckets(handle, first)
        write_checkpoint.fn(handle, first)
        switch_version.fn(handle, first)
        needed = version_files_bytes(config.checkpoint_path, 1) + 4096  # a copy of each file, and its version file
        fill(disk, needed - 4096)
        before = tree_state(disk / "ckpt")
        with pytest.raises(
            NoSpaceForCheckpoint, match=r"for the epoch_1 snapshot of version 1: .* version 1 is intact"
        ):
            preserve_version.fn(handle, first)
        assert changes(before, tree_state(disk / "ckpt")) == []
        fill(disk, needed)
        assert preserve_version.fn(handle, first) == 1
        assert CheckpointStore(str(disk / "ckpt" / "epoch_1")).read_version() == 1
    finally:
        close_training_session.fn(handle)
