"""storage.retraining.pruning: keep_last deletes old runs, never one still needed, and only after the kept one is verified."""

from __future__ import annotations

import json

import pytest
from disk_state import changes, tree_state
from run_trees import plant_lease, plant_run, promote, run_name
from store_io import StorePath, names

from storage.best_version import pinned_versions
from storage.errors import DataNotFound
from storage.retraining.pruning import prune_run_dirs
from storage.retraining.run_complete import missing_from_run
from storage.retraining.run_dirs import list_run_dirs


def test_prune_keeps_the_newest_complete_runs_live_runs_and_their_sources(root: StorePath) -> None:
    source = plant_run(root, 1, 1)
    plant_run(root, 2, 0)  # failed leftover
    plant_run(root, 3, 2)
    live = plant_run(root, 4, 1, init_path=str(source))
    plant_lease(live, expires_in=60)
    plant_run(root, 5, 1)
    plant_run(root, 6, 4)  # the current run
    plant_run(root, 7, 0)  # a newer run that has just started
    promote(root, 6, 4)

    removed = prune_run_dirs(str(root), run_name(6), keep_last=2)

    assert removed == [str(root / run_name(2)), str(root / run_name(3))]
    assert list_run_dirs(str(root)) == [run_name(d) for d in (1, 4, 5, 6, 7)]
    assert "latest.json" in names(str(root))
    # Once the live run is gone, it and its source are ordinary old runs.
    plant_lease(live, expires_in=-1)
    assert prune_run_dirs(str(root), run_name(6), keep_last=1) == [str(root / run_name(d)) for d in (1, 4, 5)]
    assert list_run_dirs(str(root)) == [run_name(6), run_name(7)]
    with pytest.raises(ValueError, match="keep_last must be >= 1.*got 0"):
        prune_run_dirs(str(root), run_name(6), keep_last=0)


def test_rejected_runs_never_displace_a_passing_one(root: StorePath) -> None:
    plant_run(root, 1, 3)
    for day, gate in ((2, "failed"), (3, "pending")):
        (plant_run(root, day, 2) / "retrain.json").write_text(f'{{"generation": {day}, "gate": "{gate}"}}')
    plant_run(root, 5, 1)
    promote(root, 5, 1)
    assert prune_run_dirs(str(root), run_name(5), keep_last=2) == [str(root / run_name(d)) for d in (2, 3)]
    assert list_run_dirs(str(root)) == [run_name(1), run_name(5)]


def test_the_promoted_run_and_what_an_unpromoted_current_run_starts_from_are_kept(root: StorePath) -> None:
    promoted = plant_run(root, 1, 3)
    plant_run(root, 2, 1)
    plant_run(root, 3, 2)
    plant_run(root, 4, 0, init_path=str(promoted))  # the current run: nothing committed, latest.json unchanged
    promote(root, 1, 3)
    assert prune_run_dirs(str(root), run_name(4), keep_last=1) == [str(root / run_name(2))]
    assert list_run_dirs(str(root)) == [run_name(1), run_name(3), run_name(4)]


def test_an_incomplete_run_is_neither_counted_nor_deleted(root: StorePath) -> None:
    plant_run(root, 1, 2)
    half = plant_run(root, 2, 3, lacking=("model.v3.h5",))  # a copy still filling it
    plant_run(root, 3, 1)
    promote(root, 3, 1)
    assert prune_run_dirs(str(root), run_name(3), keep_last=2) == []  # 1 and 3 are the two kept
    assert half.exists() and list_run_dirs(str(root)) == [run_name(d) for d in (1, 2, 3)]


def test_nothing_is_deleted_while_latest_json_names_a_lost_run(root: StorePath) -> None:
    for day in (1, 2, 3):
        plant_run(root, day, 1)
    plant_run(root, 5, 1)
    promote(root, 4, 1)  # a run deleted by hand
    before = tree_state(str(root))
    with pytest.raises(DataNotFound, match=rf"latest.json: names the promoted run {run_name(4)}, but .*does not exist"):
        prune_run_dirs(str(root), run_name(5), keep_last=1)
    assert changes(before, tree_state(str(root))) == []


def _plant_best(run: StorePath, version: int) -> None:
    """Version ``version``'s files and a best.json naming it (validation kept it beside the latest)."""
    for name in (f"model.v{version}.h5", f"embeddings_node_0.v{version}.h5", f"embeddings_node_1.v{version}.h5"):
        (run / name).write_bytes(b"h5")
    row = {"version": version, "epoch": version, "mrr": 0.9, "r1": 0.8, "r10": 1.0, "count": 10}
    row |= {"sampled": False, "seconds": 0.1, "setup": "valid"}
    (run / "best.json").write_text(json.dumps({"format": 1, "metric": "mrr", "value": 0.9, "row": row}))


def test_runs_keeping_a_best_version_are_judged_by_their_committed_version(root: StorePath) -> None:
    """best.json is no record of the retraining: a run with a pinned older version is complete (or not)
    by its committed version alone, counted as any run, and a deleted run goes whole, best.json with it."""
    old = plant_run(root, 1, 3)
    _plant_best(old, 1)
    kept = plant_run(root, 2, 4)
    _plant_best(kept, 2)
    promote(root, 2, 4)
    assert missing_from_run(str(kept)) is None and missing_from_run(str(old)) is None
    assert prune_run_dirs(str(root), run_name(2), keep_last=1) == [str(old)]
    assert list_run_dirs(str(root)) == [run_name(2)]
    assert pinned_versions(str(kept)) == {2}
    assert {"model.v2.h5", "model.v4.h5", "best.json"} <= set(names(str(kept)))
