"""Run directories of scheduled retraining (local disk and S3): listing, choosing, edge-path patterns."""

from __future__ import annotations

import json

import pytest
from run_trees import plant_lease, plant_run, run_name
from store_io import StorePath

from storage.errors import DataNotFound
from storage.lease import CheckpointLease
from storage.retraining.run_dirs import RunDir, expand_edge_paths, find_previous_run, list_run_dirs


def test_listing_keeps_only_run_directories_oldest_first(root: StorePath) -> None:
    assert list_run_dirs(str(root)) == []  # the root does not exist yet
    plant_run(root, 12, 1)
    plant_run(root, 3, 0)
    (root / "latest.json").write_text("{}")
    (root / "run-bad" / "x").write_text("x")
    (root / "run-20260301T000000Z-0000000g" / "x").write_text("x")  # 'g' is not hex
    assert list_run_dirs(str(root)) == [run_name(3), run_name(12)]


def test_previous_run_is_the_newest_earlier_committed_one_not_being_trained(root: StorePath) -> None:
    oldest = plant_run(root, 1, 2)
    plant_run(root, 2, 0)  # failed before committing anything
    busy = plant_run(root, 3, 1)
    plant_run(root, 9, 3)  # newer than the current run: never "previous"
    current = run_name(5)

    lease = CheckpointLease(str(busy), "busy", ttl=30)
    lease.acquire()
    try:
        assert find_previous_run(str(root), current) == RunDir(run_name(1), str(oldest), 2)
    finally:
        lease.release()
    assert find_previous_run(str(root), current) == RunDir(run_name(3), str(busy), 1)
    plant_lease(busy, expires_in=-5)  # its holder stopped renewing: not live
    assert find_previous_run(str(root), current) == RunDir(run_name(3), str(busy), 1)
    assert find_previous_run(str(root), run_name(1)) is None
    with pytest.raises(ValueError, match="'latest' is not a run directory name"):
        find_previous_run(str(root), "latest")


def test_edge_path_patterns_expand_to_sorted_directories(root: StorePath) -> None:
    for part in ["part-010", "part-001", "part-000", "other-000"]:
        (root / "edges" / part / "edges_0_0.h5").write_bytes(b"h5")
    (root / "edges" / "part-00x").write_text("a file, not an edge directory")
    plain = str(root / "fixed")  # not a pattern: kept as given, even if absent
    expanded = expand_edge_paths([str(root / "edges" / "part-00?"), plain, str(root / "edges" / "*-0[1]0")])
    assert expanded == [
        str(root / "edges" / "part-000"),
        str(root / "edges" / "part-001"),
        plain,
        str(root / "edges" / "part-010"),
    ]
    pattern = str(root / "edges" / "new-*")
    with pytest.raises(DataNotFound, match="matches no directory") as err:
        expand_edge_paths([pattern])
    assert err.value.url == pattern


def test_a_run_whose_gate_failed_or_was_never_judged_is_not_started_from(root: StorePath) -> None:
    good = plant_run(root, 1, 3)
    for day, gate in ((2, "failed"), (3, "pending")):
        state = {"generation": day, "gate": gate}
        (plant_run(root, day, 2) / "retrain.json").write_text(json.dumps(state))
    assert find_previous_run(str(root), run_name(5)) == RunDir(run_name(1), str(good), 3)


def test_a_run_whose_committed_version_lacks_a_file_is_not_started_from(root: StorePath) -> None:
    good = plant_run(root, 1, 3)
    plant_run(root, 2, 2, lacking=("embeddings_node_1.v2.h5",))  # an interrupted copy: pointer first
    assert find_previous_run(str(root), run_name(5)) == RunDir(run_name(1), str(good), 3)
