"""Run directories of scheduled retraining (local disk and S3): naming, choosing, globs, pruning, latest.json."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from store_io import StorePath, names

from storage.errors import BadDataError, DataNotFound
from storage.lease import CheckpointLease
from storage.run_dirs import (
    RunDir,
    expand_edge_paths,
    find_previous_run,
    list_run_dirs,
    prune_run_dirs,
    read_latest,
    run_dir_name,
    write_latest,
)


def run_name(day: int) -> str:
    """A valid run directory name that sorts by ``day``."""
    return f"run-202603{day:02d}T000000Z-{day:08x}"


def plant_run(root: StorePath, day: int, version: int, init_path: str | None = None) -> StorePath:
    """A run directory with a version pointer, one model file and a config.json naming its init_path."""
    run = root / run_name(day)
    run.mkdir(parents=True, exist_ok=True)
    (run / "checkpoint_version.txt").write_text(f"{version}\n")
    (run / f"model.v{version}.h5").write_bytes(b"model")
    (run / "config.json").write_text(json.dumps({"init_path": init_path}))
    return run


def plant_lease(run: StorePath, expires_in: float) -> None:
    """A lease.json of a holder on another host (so only its expiry tells whether it is live)."""
    holder = {
        "token": "t",
        "run": "other",
        "host": "elsewhere",
        "pid": 1,
        "started": "",
        "expires_at": time.time() + expires_in,
    }
    (run / "lease.json").write_text(json.dumps(holder))


def test_run_dir_name_is_the_utc_start_and_the_id_prefix() -> None:
    start = datetime(2026, 3, 1, 12, 30, 5, tzinfo=timezone(timedelta(hours=2)))
    assert run_dir_name("0B9E1C2D-77aa-4bb0-8ccc-0123456789ab", start) == "run-20260301T103005Z-0b9e1c2d"
    with pytest.raises(ValueError, match="naive"):
        run_dir_name("0b9e1c2d", datetime(2026, 3, 1))
    with pytest.raises(ValueError, match="8 hex digits.*'run-xyz'"):
        run_dir_name("run-xyz", start)


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


def test_prune_keeps_the_newest_committed_runs_live_runs_and_their_sources(root: StorePath) -> None:
    source = plant_run(root, 1, 1)
    plant_run(root, 2, 0)  # failed leftover
    plant_run(root, 3, 2)
    live = plant_run(root, 4, 1, init_path=str(source))
    plant_lease(live, expires_in=60)
    plant_run(root, 5, 1)
    plant_run(root, 6, 4)  # the current run
    plant_run(root, 7, 0)  # a newer run that has just started
    (root / "latest.json").write_text("{}")

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


def test_latest_json_names_the_newest_completed_run(root: StorePath) -> None:
    assert read_latest(str(root)) is None
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
    with pytest.raises(DataNotFound, match="no committed version"):
        write_latest(str(root), RunDir(run_name(7), str(root / run_name(7)), 0))
    (root / "latest.json").write_text('{"run": "yesterday"}')
    with pytest.raises(BadDataError, match="latest.json: expected a JSON object"):
        read_latest(str(root))


def test_a_run_whose_gate_failed_or_was_never_judged_is_not_started_from_nor_kept(root: StorePath) -> None:
    good = plant_run(root, 1, 3)
    for day, gate in ((2, "failed"), (3, "pending")):
        state = {"generation": day, "gate": gate}
        (plant_run(root, day, 2) / "retrain.json").write_text(json.dumps(state))
    current = run_name(5)
    assert find_previous_run(str(root), current) == RunDir(run_name(1), str(good), 3)
    plant_run(root, 5, 1)
    # keep_last counts passing runs only: the rejected ones never displace the good one.
    assert prune_run_dirs(str(root), current, keep_last=2) == [str(root / run_name(d)) for d in (2, 3)]
    assert list_run_dirs(str(root)) == [run_name(1), current]
