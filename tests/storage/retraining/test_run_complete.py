"""storage.retraining.run_complete: a run directory is complete when every file of its committed version is there."""

from __future__ import annotations

from pathlib import Path

from run_trees import plant_run, run_name
from store_io import StorePath

from storage.retraining.run_complete import missing_from_run


def test_a_committed_version_with_every_file_is_complete(root: StorePath) -> None:
    assert missing_from_run(str(plant_run(root, 1, 3))) is None


def test_what_a_run_lacks_is_named(root: StorePath) -> None:
    assert missing_from_run(str(root / run_name(9))) == "the directory does not exist"
    assert (
        missing_from_run(str(plant_run(root, 2, 0))) == "no committed version (checkpoint_version.txt is missing or 0)"
    )
    ahead = plant_run(root, 3, 4, lacking=("model.v4.h5", "embeddings_node_1.v4.h5"))
    assert missing_from_run(str(ahead)) == (
        "checkpoint_version.txt says version 4, but model.v4.h5 and 1 more of its files are missing"
    )
    one = plant_run(root, 4, 2, lacking=("embeddings_node_0.v2.h5",))
    assert missing_from_run(str(one)) == "checkpoint_version.txt says version 2, but embeddings_node_0.v2.h5 is missing"


def test_without_a_config_only_the_model_file_is_checked(tmp_path: Path) -> None:
    run = tmp_path / run_name(1)
    run.mkdir()
    (run / "checkpoint_version.txt").write_text("2\n")
    assert "model.v2.h5 is missing" in str(missing_from_run(str(run)))
    (run / "model.v2.h5").write_bytes(b"h5")
    assert missing_from_run(str(run)) is None
