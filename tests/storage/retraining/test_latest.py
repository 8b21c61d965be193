"""storage.retraining.latest: latest.json names the promoted run; a latest.json naming a lost run is an error, not a first run."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from disk_state import changes, tree_state
from run_trees import plant_run, promote, run_name
from store_io import StorePath

from storage.errors import BadDataError, DataNotFound
from storage.fs import changes as fs_changes
from storage.retraining.latest import promoted_run, read_latest, starting_run, write_latest
from storage.retraining.run_dirs import RunDir


def test_latest_json_names_the_newest_completed_run(root: StorePath) -> None:
    assert read_latest(str(root)) is None
    plant_run(root, 5, 9)
    plant_run(root, 6, 4)
    done = datetime(2026, 3, 6, 1, 2, 3, tzinfo=UTC)
    newer = RunDir(run_name(6), str(root / run_name(6)), 4)
    written = write_latest(str(root), newer, completed_at=done)
    expected = {
        "run": run_name(6),
        "checkpoint_path": str(root / run_name(6)),
        "version": 4,
        "completed_at": "2026-03-06T01:02:03+00:00",
    }
    assert written == expected
    assert json.loads((root / "latest.json").read_text()) == expected
    assert read_latest(str(root)) == expected
    # An earlier run finishing late does not move latest.json backwards.
    assert write_latest(str(root), RunDir(run_name(5), str(root / run_name(5)), 9)) is None
    assert read_latest(str(root)) == expected
    (root / "latest.json").write_text('{"run": "yesterday"}')
    with pytest.raises(BadDataError, match="latest.json: expected a JSON object"):
        read_latest(str(root))


def test_an_incomplete_run_is_never_promoted(root: StorePath) -> None:
    plant_run(root, 7, 0)
    with pytest.raises(DataNotFound, match=r"not promoted to latest.json: no committed version"):
        write_latest(str(root), RunDir(run_name(7), str(root / run_name(7)), 0))
    plant_run(root, 8, 3, lacking=("model.v3.h5",))
    with pytest.raises(DataNotFound, match=r"not promoted to latest.json: .* model.v3.h5 is missing"):
        write_latest(str(root), RunDir(run_name(8), str(root / run_name(8)), 3))
    assert read_latest(str(root)) is None


def test_the_promoted_run_is_found_by_name_where_the_tree_is_now(root: StorePath) -> None:
    assert promoted_run(str(root)) is None and starting_run(str(root), run_name(9)) is None  # a first run
    plant_run(root, 2, 3)
    latest = {"run": run_name(2), "checkpoint_path": "/where/it/was/before/a/move", "version": 3}
    (root / "latest.json").write_text(json.dumps(latest))
    assert promoted_run(str(root)) == RunDir(run_name(2), str(root / run_name(2)), 3)
    assert starting_run(str(root), run_name(9)) == RunDir(run_name(2), str(root / run_name(2)), 3)


@pytest.mark.parametrize("loss", ["deleted", "emptied", "half-copied"])
def test_a_latest_json_naming_a_lost_run_is_an_error_that_changes_nothing(root: StorePath, loss: str) -> None:
    plant_run(root, 1, 2)  # an older complete run is still there: the error is not "pick another"
    promoted = plant_run(root, 3, 5)
    promote(root, 3, 5)
    if loss == "deleted":
        fs_changes.remove_tree(str(promoted))
        what = "the directory does not exist"
    elif loss == "emptied":
        (promoted / "checkpoint_version.txt").write_text("")
        what = "no committed version"
    else:
        fs_changes.remove(str(promoted / "embeddings_node_1.v5.h5"))
        what = "embeddings_node_1.v5.h5 is missing"
    before = tree_state(str(root))
    for check in (lambda: promoted_run(str(root)), lambda: starting_run(str(root), run_name(9))):
        with pytest.raises(DataNotFound) as raised:
            check()
        message = str(raised.value)
        assert message.startswith(f"{root}/latest.json: names the promoted run {run_name(3)}, but ")
        assert what in message and "delete latest.json to start over" in message and "\n" not in message
    assert changes(before, tree_state(str(root))) == []


def test_latest_json_with_no_earlier_run_left_to_start_from_is_an_error(root: StorePath) -> None:
    plant_run(root, 6, 2)
    promote(root, 6, 2)
    with pytest.raises(DataNotFound, match=rf"names the promoted run {run_name(6)}, but no complete run older"):
        starting_run(str(root), run_name(4))  # a retry of a flow run that started before the promoted one
    assert starting_run(str(root), run_name(6)) is None  # the promoted run itself, retried
