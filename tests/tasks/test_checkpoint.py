"""The checkpoint steps write -> switch -> preserve -> remove (task bodies via ``.fn()``).

The commit protocol: version ``v + 1`` files are written while ``v`` stays committed;
only ``switch_version`` moves the pointer; the old version goes last.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pbg_core.config import parse_config
from pbg_core.types import Bucket
from tasks.buckets import schedule_buckets
from tasks.checkpoint import preserve_version, remove_old_version, switch_version, write_checkpoint
from tasks.plan import plan_training
from tasks.runs import open_run
from tasks.sessions import close_training_session, get_session, open_training_session


def versioned(checkpoint: Path) -> set[str]:
    return {p.name for p in checkpoint.glob("*.h5")}


def pointer(checkpoint: Path) -> int:
    path = checkpoint / "checkpoint_version.txt"
    return int(path.read_text()) if path.exists() else 0


def mtimes(paths: list[Path]) -> list[int]:
    return [p.stat().st_mtime_ns for p in paths]


@pytest.fixture
def session(make_config: Any) -> Any:
    config = parse_config(make_config(num_epochs=3, checkpoint_preservation_interval=2))
    handle = open_training_session.fn(open_run(config))
    yield handle, config, plan_training.fn(open_run(config)).remaining, Path(config.checkpoint_path)
    close_training_session.fn(handle)


def test_commit_protocol_over_two_iterations(session: Any, train_buckets: Any, h5_datasets: Any) -> None:
    handle, _, iterations, checkpoint = session
    first, second = iterations[:2]

    train_buckets(handle, first)
    assert write_checkpoint.fn(handle, first) == 1
    assert versioned(checkpoint) == {"embeddings_node_0.v1.h5", "model.v1.h5"}
    assert pointer(checkpoint) == 0  # written, not committed
    rows = [json.loads(line) for line in (checkpoint / "training_stats.json").read_text().splitlines()]
    assert [row["index"] for row in rows] == [0, 0] and "eval_stats_chunk_avg" in rows[1]
    assert switch_version.fn(handle, first) == 1
    assert pointer(checkpoint) == 1
    assert preserve_version.fn(handle, first) is None  # epoch 1 is not a multiple of 2
    assert remove_old_version.fn(handle, first) is None  # version 0 is never removed
    v1 = h5_datasets(checkpoint / "embeddings_node_0.v1.h5")["embeddings"]

    train_buckets(handle, second)
    assert write_checkpoint.fn(handle, second) == 2
    assert versioned(checkpoint) == {"embeddings_node_0.v1.h5", "model.v1.h5", "embeddings_node_0.v2.h5", "model.v2.h5"}
    # Training v2 never touches the committed v1 files.
    assert h5_datasets(checkpoint / "embeddings_node_0.v1.h5")["embeddings"].tobytes() == v1.tobytes()
    assert switch_version.fn(handle, second) == 2
    assert preserve_version.fn(handle, second) == 2
    assert remove_old_version.fn(handle, second) == 1
    assert versioned(checkpoint) == {"embeddings_node_0.v2.h5", "model.v2.h5"}
    snapshot = checkpoint / "epoch_2"
    assert versioned(snapshot) == {"embeddings_node_0.v2.h5", "model.v2.h5"}
    assert pointer(snapshot) == 2
    v2 = h5_datasets(checkpoint / "embeddings_node_0.v2.h5")
    assert h5_datasets(snapshot / "embeddings_node_0.v2.h5")["embeddings"].tobytes() == v2["embeddings"].tobytes()
    assert v2["embeddings"].tobytes() != v1.tobytes()

    # Retried steps after the commit change nothing.
    files = sorted(checkpoint.glob("*.h5"))
    before = mtimes(files)
    assert write_checkpoint.fn(handle, second) == 2
    assert switch_version.fn(handle, second) == 2
    assert remove_old_version.fn(handle, second) is None  # nothing older is left
    assert mtimes(files) == before and pointer(checkpoint) == 2


def test_crash_before_switch_leaves_the_committed_version(
    session: Any, make_config: Any, train_buckets: Any, h5_datasets: Any
) -> None:
    handle, config, iterations, checkpoint = session
    first, second = iterations[:2]
    train_buckets(handle, first)
    write_checkpoint.fn(handle, first)
    switch_version.fn(handle, first)
    committed = h5_datasets(checkpoint / "embeddings_node_0.v1.h5")["embeddings"]

    train_buckets(handle, second)
    write_checkpoint.fn(handle, second)  # ... and the process dies before switch_version
    close_training_session.fn(handle)
    assert pointer(checkpoint) == 1

    written = h5_datasets(checkpoint / "embeddings_node_0.v2.h5")["embeddings"]
    assert torch.equal(
        torch.from_numpy(h5_datasets(checkpoint / "embeddings_node_0.v1.h5")["embeddings"]), torch.from_numpy(committed)
    )  # v1 untouched

    reopened = open_training_session.fn(open_run(config))
    try:
        session_state = get_session(reopened)
        assert session_state.residency.committed_version == 1
        (resumed,) = plan_training.fn(open_run(config)).remaining[:1]
        assert resumed.version == 2
        # The pass was recorded complete: nothing is trained again, v2 is committed as written.
        assert schedule_buckets.fn(reopened, resumed) == []
        write_checkpoint.fn(reopened, resumed)
        switch_version.fn(reopened, resumed)
        assert pointer(checkpoint) == 2
        assert torch.equal(
            torch.from_numpy(h5_datasets(checkpoint / "embeddings_node_0.v2.h5")["embeddings"]),
            torch.from_numpy(written),
        )
        assert not (checkpoint / "progress").exists()
    finally:
        close_training_session.fn(reopened)


def test_remove_old_version_also_removes_leftovers_of_an_interrupted_removal(session: Any, train_buckets: Any) -> None:
    handle, _, iterations, checkpoint = session
    first, second = iterations[:2]
    for iteration in (first, second):
        train_buckets(handle, iteration)
        write_checkpoint.fn(handle, iteration)
        switch_version.fn(handle, iteration)
    # v1 is still there: as if the process died while removing it.
    assert "model.v1.h5" in versioned(checkpoint)
    third = iterations[2]
    train_buckets(handle, third)
    write_checkpoint.fn(handle, third)
    switch_version.fn(handle, third)
    assert remove_old_version.fn(handle, third) == 2
    assert versioned(checkpoint) == {"embeddings_node_0.v3.h5", "model.v3.h5"}


def test_remove_leftovers_deletes_older_versions_and_committed_progress(make_config: Any) -> None:
    from pbg_core.ports import CheckpointMetadata, PassProgress
    from storage.checkpoints import CheckpointStore
    from storage.progress import CheckpointProgress
    from tasks.checkpoint import remove_leftovers

    config = parse_config(make_config("leftovers"))
    store = CheckpointStore(config.checkpoint_path)
    for version in (1, 2, 3):
        store.save_embeddings("node", 0, version, torch.zeros(200, 16), None, CheckpointMetadata(config_json="{}"))
        store.save_model(version, {}, {}, None, CheckpointMetadata(config_json="{}"))
    store.write_version(3)
    progress = CheckpointProgress(store)
    progress.write(PassProgress(version=3, iteration_index=2, order=[Bucket(0, 0)], done=1))  # committed since
    progress.write(PassProgress(version=4, iteration_index=3, order=[Bucket(0, 0)], done=0))  # still open
    assert remove_leftovers.fn(open_run(config), 3, 1) == [1, 2]
    assert store.list_versions() == [3]
    assert progress.read(3) is None and progress.read(4) is not None


def test_rerun_redoes_a_snapshot_interrupted_after_the_commit(
    session: Any, make_config: Any, train_buckets: Any, h5_datasets: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage.fs import changes
    from tasks.checkpoint import remove_leftovers

    handle, config, iterations, checkpoint = session
    first, second = iterations[:2]
    for iteration in (first, second):
        train_buckets(handle, iteration)
        write_checkpoint.fn(handle, iteration)
        switch_version.fn(handle, iteration)
    real_copy, copied = changes.copy, []

    def dies_after_one_file(src: str, dst: str, storage_options: Any = None) -> None:
        if copied:
            raise KeyboardInterrupt("killed while preserving")  # as a kill: no retry, no clean-up
        real_copy(src, dst, storage_options)
        copied.append(dst)

    monkeypatch.setattr(changes, "copy", dies_after_one_file)
    with pytest.raises(KeyboardInterrupt):
        preserve_version.fn(handle, second)  # v2 ends epoch 2: its snapshot is due
    monkeypatch.undo()
    close_training_session.fn(handle)
    snapshot = checkpoint / "epoch_2"
    assert len(versioned(snapshot)) == 1 and pointer(snapshot) == 0  # torn: one file, no version file

    run = open_run(config)
    plan = plan_training.fn(run)
    assert plan.committed_version == 2  # the iteration counts as done
    assert remove_leftovers.fn(run, plan.committed_version, plan.num_edge_chunks) == [1]
    assert versioned(snapshot) == {"embeddings_node_0.v2.h5", "model.v2.h5"} and pointer(snapshot) == 2
    for name in versioned(snapshot):
        assert h5_datasets(snapshot / name).keys() == h5_datasets(checkpoint / name).keys()
    assert (
        h5_datasets(snapshot / "embeddings_node_0.v2.h5")["embeddings"].tobytes()
        == h5_datasets(checkpoint / "embeddings_node_0.v2.h5")["embeddings"].tobytes()
    )
    # Idempotent: a complete snapshot is not copied again.
    before = mtimes(sorted(snapshot.iterdir()))
    assert remove_leftovers.fn(run, plan.committed_version, plan.num_edge_chunks) == []
    assert mtimes(sorted(snapshot.iterdir())) == before
