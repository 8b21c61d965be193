"""Partial checkpoint states (an interrupted copy or sync, a lost file): no step deletes the only
complete copy of a version; each refusal is one line naming both versions, and the directory is
byte-identical afterwards.

The states are planted in copies of one real checkpoint: the 2x2 planted graph trained by the
task bodies (``.fn()``) to version 2 (snapshots ``epoch_1/`` and ``epoch_2/``), then version 3
written and never committed (killed before ``switch-version``: its pass's record and progress
areas are still there).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from disk_state import changes, tree_state

from pbg_core.config import parse_config
from storage.checkpoints import CheckpointStore
from storage.version_check import IncompleteVersionError
from tasks.checkpoint import preserve_version, remove_leftovers, remove_old_version, switch_version, write_checkpoint
from tasks.plan import plan_training
from tasks.runs import open_run
from tasks.sessions import close_training_session, open_training_session

V2_FILES = ["embeddings_node_0.v2.h5", "embeddings_node_1.v2.h5", "model.v2.h5"]
V3_FILES = ["embeddings_node_0.v3.h5", "embeddings_node_1.v3.h5", "model.v3.h5"]


SETTINGS = {"num_epochs": 3, "checkpoint_preservation_interval": 1}


@pytest.fixture(scope="module")
def written_v3(graph_2x2: Any, config_for: Any, train_buckets: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint at version 2 with version 3 written in full but not committed (kept pristine)."""
    checkpoint = tmp_path_factory.mktemp("states") / "ckpt"
    config = parse_config(config_for(graph_2x2, checkpoint, progress_interval=0, **SETTINGS))
    handle = open_training_session.fn(open_run(config))
    try:
        first, second, third = plan_training.fn(open_run(config)).remaining
        for iteration in (first, second):
            train_buckets(handle, iteration)
            write_checkpoint.fn(handle, iteration)
            switch_version.fn(handle, iteration)
            preserve_version.fn(handle, iteration)
            remove_old_version.fn(handle, iteration)
        train_buckets(handle, third)
        write_checkpoint.fn(handle, third)  # ... and the process is killed here
    finally:
        close_training_session.fn(handle)
    assert sorted(p.name for p in checkpoint.glob("*.h5")) == sorted(V2_FILES + V3_FILES)
    assert (checkpoint / "progress" / "v3.json").exists() and (checkpoint / "epoch_2").is_dir()
    return checkpoint


@pytest.fixture
def planted(written_v3: Path, graph_2x2: Any, config_for: Any, tmp_path: Path) -> tuple[Path, str]:
    """A copy of ``written_v3`` to plant a state in, and a run of its config (handle)."""
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(written_v3, checkpoint)
    return checkpoint, open_run(parse_config(config_for(graph_2x2, checkpoint, **SETTINGS)))


def refused(checkpoint: Path, step: Any) -> str:
    """The one-line message ``step()`` refuses with; nothing under ``checkpoint`` changed."""
    before = tree_state(checkpoint)
    with pytest.raises(IncompleteVersionError) as raised:
        step()
    assert changes(before, tree_state(checkpoint)) == []
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{checkpoint}: ")
    return message[len(str(checkpoint)) + 2 :]


def test_a_pointer_ahead_of_its_files_removes_nothing(planted: tuple[Path, str]) -> None:
    # An interrupted copy of a directory that was at version 3: the pointer came, v3's files did not.
    checkpoint, run = planted
    for name in V3_FILES:
        (checkpoint / name).unlink()
    (checkpoint / "checkpoint_version.txt").write_text("3\n")
    expected = (
        "checkpoint_version.txt says 3 but version 3's files are missing (3 of 3: embeddings_node_0.v3.h5, "
        "embeddings_node_1.v3.h5, model.v3.h5): found complete version 2; nothing was removed; restore version "
        "3's files, or write 2 into checkpoint_version.txt to go on from version 2"
    )
    assert refused(checkpoint, lambda: plan_training.fn(run)) == expected
    # The cleanup step on its own refuses too: v2 and the saves of the pass that wrote v3 stay.
    assert refused(checkpoint, lambda: remove_leftovers.fn(run, 3, 1)) == expected
    # The remedy the message gives works: the pass of v3 resumes from its record.
    (checkpoint / "checkpoint_version.txt").write_text("2\n")
    plan = plan_training.fn(run)
    assert plan.committed_version == 2 and [it.version for it in plan.remaining] == [3]
    assert remove_leftovers.fn(run, 2, plan.num_edge_chunks) == []
    assert (checkpoint / "progress" / "v3.json").exists() and all((checkpoint / n).exists() for n in V2_FILES)


def test_a_lost_file_of_the_committed_version_is_named_with_the_complete_uncommitted_one(
    planted: tuple[Path, str],
) -> None:
    checkpoint, run = planted
    (checkpoint / "embeddings_node_1.v2.h5").unlink()
    expected = (
        "checkpoint_version.txt says 2 but version 2's files are missing (1 of 3: embeddings_node_1.v2.h5): "
        "found complete version 3 (written, never committed); nothing was removed; restore version 2's files "
        "(a complete copy is in epoch_2/), or write 3 into checkpoint_version.txt to go on from version 3"
    )
    assert (checkpoint / "epoch_2" / "embeddings_node_1.v2.h5").exists()  # the copy the message points to
    assert refused(checkpoint, lambda: plan_training.fn(run)) == expected
    assert refused(checkpoint, lambda: remove_leftovers.fn(run, 2, 1)) == expected


def test_a_file_cut_short_is_as_good_as_missing(planted: tuple[Path, str]) -> None:
    checkpoint, run = planted
    model = checkpoint / "model.v2.h5"
    model.write_bytes(model.read_bytes()[:1000])  # a copy interrupted mid-file
    message = refused(checkpoint, lambda: plan_training.fn(run))
    assert message.startswith(
        "checkpoint_version.txt says 2 but version 2's files are missing or unreadable (model.v2.h5: not a "
        "readable HDF5 file ("
    )
    assert "found complete version 3 (written, never committed); nothing was removed" in message


def test_a_snapshot_that_lost_a_file_is_copied_again(planted: tuple[Path, str], h5_datasets: Any) -> None:
    # epoch_2/ says version 2 (its version file went first in a sync), but a file did not arrive.
    checkpoint, run = planted
    (checkpoint / "epoch_2" / "embeddings_node_0.v2.h5").unlink()
    v2 = {name: (checkpoint / name).read_bytes() for name in V2_FILES}
    assert remove_leftovers.fn(run, 2, 1) == []
    for name in V2_FILES:
        assert (checkpoint / "epoch_2" / name).read_bytes() == v2[name] == (checkpoint / name).read_bytes()
    assert CheckpointStore(str(checkpoint / "epoch_2")).read_version() == 2


def test_an_incomplete_version_is_never_committed(
    graph: Any, make_config: Any, train_buckets: Any, tmp_path: Path
) -> None:
    config = parse_config(make_config(num_epochs=2))
    checkpoint = Path(config.checkpoint_path)
    handle = open_training_session.fn(open_run(config))
    try:
        first, second = plan_training.fn(open_run(config)).remaining
        train_buckets(handle, first)
        write_checkpoint.fn(handle, first)
        switch_version.fn(handle, first)
        train_buckets(handle, second)
        write_checkpoint.fn(handle, second)
        (checkpoint / "embeddings_node_0.v2.h5").unlink()  # lost between writing and committing
        assert refused(checkpoint, lambda: switch_version.fn(handle, second)) == (
            "version 2's files are missing (1 of 2: embeddings_node_0.v2.h5), so it is not committed "
            "(checkpoint_version.txt says 1): found complete version 1; nothing was removed"
        )
    finally:
        close_training_session.fn(handle)


@pytest.mark.parametrize("pointer", ["", "1\n"])
def test_a_pointer_behind_its_files_is_refused_before_training_overwrites_them(
    planted: tuple[Path, str], pointer: str
) -> None:
    """checkpoint_version.txt lost (or restored from an older copy) while version 2 is committed:
    training on from 0 (or 1) would write versions 1-3 again over the trained ones."""
    checkpoint, run = planted
    version_file = checkpoint / "checkpoint_version.txt"
    if pointer:
        version_file.write_text(pointer)
    else:
        version_file.unlink()
    said = "says 1" if pointer else "is missing or says 0"
    expected = (
        f"checkpoint_version.txt {said} but the directory holds complete version 3: the pointer is behind its "
        "files (training on would overwrite them); nothing was removed; write 3 into checkpoint_version.txt to go "
        "on from version 3, or move those files away to start over in this directory"
    )
    assert refused(checkpoint, lambda: plan_training.fn(run)) == expected


def test_the_next_version_in_progress_is_not_a_pointer_behind(planted: tuple[Path, str]) -> None:
    """Pointer 2 with version 3 written and never committed is the normal state after a kill: planned on."""
    _, run = planted
    plan = plan_training.fn(run)
    assert plan.committed_version == 2 and [it.version for it in plan.remaining] == [3]
