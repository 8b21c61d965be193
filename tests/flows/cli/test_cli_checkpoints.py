"""Checkpoints that are not what a command needs, through the real ``pbg`` commands: one line
naming the path and what was expected, nothing removed or written.

- ``checkpoint_version.txt`` ahead of its files: a copy of a real trained checkpoint (the
  session's ``trained`` run: version 3) in the state an interrupted copy leaves (the small
  pointer file arrived, some data files did not); the same line from train, eval and export.
- ``init_path``, ``checkpoint_path`` or ``entity_path`` naming a file, not a directory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _cli import cli_environment, run_pbg
from disk_state import changes, tree_state


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


@pytest.fixture
def copied(trained: Any, tmp_path: Path) -> Path:
    """A copy of the trained checkpoint (at version 3) and its config as ``config.json`` in ``tmp_path``."""
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(trained.checkpoint, checkpoint)
    (tmp_path / "config.json").write_text(json.dumps({**trained.config, "checkpoint_path": str(checkpoint)}))
    assert (checkpoint / "checkpoint_version.txt").read_text() == "3\n"
    return checkpoint


def last_line(done: Any) -> str:
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout, done.stderr
    return done.stderr.strip().splitlines()[-1]


def test_train_eval_and_export_name_a_pointer_ahead_of_its_files(
    cli_env: dict[str, str], copied: Path, tmp_path: Path
) -> None:
    (copied / "checkpoint_version.txt").write_text("4\n")  # version 4 was committed at the source
    before = tree_state(copied)
    expected = (
        f"{copied}: checkpoint_version.txt says 4 but version 4's files are missing (2 of 2: "
        "embeddings_node_0.v4.h5, model.v4.h5): found complete version 3; nothing was removed; restore "
        "version 4's files, or write 3 into checkpoint_version.txt to go on from version 3"
    )
    train = run_pbg(cli_env, tmp_path, "train", "config.json", "-p", "num_epochs=5")
    assert last_line(train) == f"pbg train: error: {expected}"
    assert last_line(run_pbg(cli_env, tmp_path, "eval", "config.json")) == f"pbg eval: error: {expected}"
    export = run_pbg(cli_env, tmp_path, "export", "config.json", "--format", "npy", "--output", "out")
    assert last_line(export) == f"pbg export: error: {expected}"
    assert changes(before, tree_state(copied)) == [] and not (tmp_path / "out").exists()


def test_a_file_cut_short_is_one_line_too(cli_env: dict[str, str], copied: Path, tmp_path: Path) -> None:
    # Every name is there: the file's HDF5 metadata shows it is cut short (pbg train's plan opens
    # it the same way: tests/tasks/test_checkpoint_states.py).
    model = copied / "model.v3.h5"
    model.write_bytes(model.read_bytes()[:2000])
    before = tree_state(copied)
    line = last_line(run_pbg(cli_env, tmp_path, "export", "config.json", "--format", "npy", "--output", "out"))
    assert line.startswith(
        f"pbg export: error: {copied}: checkpoint_version.txt says 3 but version 3's files are missing or "
        "unreadable (model.v3.h5: not a readable HDF5 file ("
    )
    assert "truncated file" in line and line.endswith(
        "found no other version's files; nothing was removed; restore version 3's files, or train from scratch "
        "into a new checkpoint_path"
    )
    assert changes(before, tree_state(copied)) == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("field", ["init_path", "checkpoint_path", "entity_path"])
def test_a_file_where_a_directory_is_expected_is_named_as_such(
    cli_env: dict[str, str], trained: Any, tmp_path: Path, field: str
) -> None:
    (tmp_path / "notes.txt").write_text("not a directory\n")
    (tmp_path / "config.json").write_text(json.dumps({**trained.config, field: str(tmp_path / "notes.txt")}))
    expected = {
        "init_path": "init_path is a file, expected a checkpoint directory (checkpoint_version.txt, model.v<N>.h5, "
        "embeddings_<type>_<part>.v<N>.h5)",
        "checkpoint_path": "checkpoint_path is a file, expected a checkpoint directory (checkpoint_version.txt, "
        "model.v<N>.h5, embeddings_<type>_<part>.v<N>.h5), or where to create one",
        "entity_path": "entity_path is a file, expected the entity directory `pbg import` writes "
        "(entity_count_<type>_<part>.txt, entity_names_<type>_<part>.json)",
    }[field]
    before = tree_state(tmp_path)
    line = last_line(run_pbg(cli_env, tmp_path, "train", "config.json"))
    assert line == f"pbg train: error: {tmp_path / 'notes.txt'}: {expected}"
    assert changes(before, tree_state(tmp_path)) == []
