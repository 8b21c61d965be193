"""storage.retraining.arrivals: what a retraining run imports, what is new to it, and its holdouts."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import fsspec
import pytest
from disk_state import changes, tree_state

from pbg_core.config import parse_config
from storage.errors import DataNotFound
from storage.importing.manifest import read_manifest
from storage.importing.options import ImportOptions
from storage.retraining.arrivals import Received, edge_path_for, list_files, receive
from storage.retraining.holdout import holdout_path_of
from storage.retraining.options import IncomingOptions
from storage.retraining.received import ReceivedFile, RunRecords
from tasks.retrain import imported_data, importer_for

OPTIONS = ImportOptions(lhs_col=0, rhs_col=1)


def config(root: str) -> Any:
    return parse_config(
        {
            "entities": {"user": {"num_partitions": 2}},
            "relations": [{"name": "follows", "lhs": "user", "rhs": "user"}],
            "dimension": 4,
            "entity_path": f"{root}/data",
            "edge_paths": [f"{root}/edges/gen*_partitioned"],
            "checkpoint_path": f"{root}/runs",
        }
    )


def receive_now(cfg: Any, incoming: IncomingOptions, base: int | None, earlier: RunRecords | None = None) -> Received:
    """:func:`receive` with the real import of ``cfg``'s entity_path (as the task joins them), seed 0."""
    importer = importer_for(cfg, incoming, 0)
    return receive(incoming, imported_data(cfg), importer, base, 0, cfg.storage_options_for_fs(), earlier)


def write(url: str, text: str) -> None:
    with fsspec.open(url, "w") as handle:
        handle.write(text)


def day(start: int, count: int) -> str:
    return "".join(f"u{i}\tu{(i * 7 + 3) % (start + count)}\n" for i in range(start, start + count))


def test_files_are_listed_by_glob_or_directory_without_hidden_ones(store_root: str) -> None:
    for name in ("b.tsv", "a.tsv", ".a.tsv.part", "_SUCCESS", "c.csv"):
        write(f"{store_root}/in/{name}", "x\ty\n")
    assert list_files(f"{store_root}/in/*.tsv") == [f"{store_root}/in/a.tsv", f"{store_root}/in/b.tsv"]
    assert list_files(f"{store_root}/in") == [f"{store_root}/in/{n}" for n in ("a.tsv", "b.tsv", "c.csv")]
    assert list_files(f"{store_root}/nothing-yet") == [] and list_files(f"{store_root}/in/*.gz") == []


def test_edge_paths_name_the_generation_and_the_file_and_never_collide() -> None:
    taken: set[str] = set()
    first = edge_path_for("s3://b/edges", 3, "s3://b/in/2026-12-04/edges.tsv.gz", taken)
    second = edge_path_for("s3://b/edges", 3, "s3://b/in/2026-12-05/edges.tsv", taken)
    assert first == "s3://b/edges/gen0003-edges_partitioned"
    assert second == "s3://b/edges/gen0003-edges-2_partitioned"
    assert edge_path_for("/e", 0, "/in/my day (1).parquet", set()) == "/e/gen0000-my_day_1__partitioned"


def test_each_receive_imports_only_what_arrived_and_names_what_is_new(store_root: str) -> None:
    cfg = config(store_root)
    incoming = IncomingOptions(inputs=f"{store_root}/in/*.tsv", edges_dir=f"{store_root}/edges", holdout_fraction=0.2)
    write(f"{store_root}/in/day0.tsv", day(0, 400))
    first = receive_now(cfg, incoming, None)
    assert first.imported == [f"{store_root}/in/day0.tsv"] and first.generation == 0 and first.new_generations == [0]
    gen0 = f"{store_root}/edges/gen0000-day0_partitioned"
    assert first.edge_paths == [gen0] and first.holdouts == [holdout_path_of(gen0)]

    write(f"{store_root}/in/day1.tsv", day(400, 100))
    second = receive_now(cfg, incoming, 0)  # the starting run trained generation 0
    gen1 = f"{store_root}/edges/gen0001-day1_partitioned"
    assert second.imported == [f"{store_root}/in/day1.tsv"] and second.new_generations == [1]
    assert second.edge_paths == [gen0, gen1] and second.holdouts == [holdout_path_of(gen1)]
    manifest = read_manifest(f"{store_root}/data")
    assert manifest is not None and [g["generation"] for g in manifest["generations"]] == [0, 1]

    third = receive_now(cfg, incoming, 1)
    assert third.imported == [] and third.new_generations == [] and third.holdouts == []
    retried = receive_now(cfg, incoming, 0)  # generation 1 not yet trained by a passing run: still new
    assert retried.imported == [] and retried.new_generations == [1] and retried.holdouts == second.holdouts


def test_a_glob_matching_nothing_imports_nothing(tmp_path: Path) -> None:
    cfg = config(str(tmp_path))
    incoming = IncomingOptions(inputs=str(tmp_path / "in" / "*.tsv"), edges_dir=str(tmp_path / "edges"))
    received = receive_now(cfg, incoming, None)
    assert received.imported == [] and received.new_generations == [] and not (tmp_path / "data").exists()


def test_an_import_done_by_hand_is_recognised_and_a_dropped_day_is_no_new_data(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from storage.importing.importer import import_edges

    monkeypatch.chdir(tmp_path)
    cfg = config(str(tmp_path))
    write(str(tmp_path / "in" / "day0.tsv"), day(0, 300))
    by_hand = cfg.model_copy(update={"edge_paths": [str(tmp_path / "edges" / "gen0000-day0_partitioned")]})
    import_edges(by_hand, ["in/day0.tsv"], OPTIONS, seed=0)  # a relative spelling of the same file
    incoming = IncomingOptions(inputs=str(tmp_path / "in"), edges_dir=str(tmp_path / "edges"))
    received = receive_now(cfg, incoming, 0)
    assert received.imported == [] and received.new_generations == []

    write(str(tmp_path / "in" / "day1.tsv"), day(300, 50))
    grown = receive_now(cfg, incoming, 0)
    assert grown.new_generations == [1]
    for path in (grown.edge_paths[1], grown.holdouts[0]):
        fsspec.filesystem("file").rm(path, recursive=True)  # the bad day dropped
    again = receive_now(cfg, incoming, 0)
    assert again.new_generations == [] and len(again.edge_paths) == 1


def project_config(project: str) -> tuple[Any, IncomingOptions]:
    """The config and incoming options of a project directory (every path inside it)."""
    incoming = IncomingOptions(inputs=f"{project}/in", edges_dir=f"{project}/edges", holdout_fraction=0.2)
    return config(project), incoming


def move_project(old: str, new: str) -> None:
    """The whole project elsewhere: a rename on local disk, a copy of every object then a delete on S3."""
    if not old.startswith("s3://"):
        shutil.move(old, new)
        return
    filesystem = fsspec.filesystem("s3")
    base = old.removeprefix("s3://")
    for path in filesystem.find(base):
        filesystem.copy(path, new.removeprefix("s3://") + path[len(base) :])
    filesystem.rm(base, recursive=True)


def test_a_moved_project_imports_nothing_it_received_before(store_root: str) -> None:
    cfg, incoming = project_config(f"{store_root}/project")
    write(f"{store_root}/project/in/day0.tsv", day(0, 300))
    write(f"{store_root}/project/in/day1.tsv", day(300, 60))
    first = receive_now(cfg, incoming, None)
    assert sorted(first.imported) == [f"{store_root}/project/in/day{d}.tsv" for d in (0, 1)]
    records = [ReceivedFile.from_json(r) for r in first.received_files]
    assert {(r.identity.relative, r.generation) for r in records if r} == {("day0.tsv", 0), ("day1.tsv", 0)}

    move_project(f"{store_root}/project", f"{store_root}/moved")
    cfg, incoming = project_config(f"{store_root}/moved")
    write(f"{store_root}/moved/in/day2.tsv", day(360, 40))
    earlier = RunRecords([r for r in records if r], {})
    second = receive_now(cfg, incoming, 0, earlier)
    assert second.imported == [f"{store_root}/moved/in/day2.tsv"] and second.new_generations == [1]
    # The first generation's edge path is found where it is now, not where the manifest recorded it.
    assert second.edge_paths == [
        f"{store_root}/moved/edges/gen0000-day0_partitioned",
        f"{store_root}/moved/edges/gen0000-day1_partitioned",
        f"{store_root}/moved/edges/gen0001-day2_partitioned",
    ]
    assert second.holdouts == [f"{store_root}/moved/edges/gen0001-day2_holdout"]


def test_records_from_before_identities_still_keep_old_files_out_after_a_move(tmp_path: Path) -> None:
    """An import recorded only by the manifest's absolute paths (no received_files anywhere)."""
    cfg, incoming = project_config(str(tmp_path / "project"))
    write(str(tmp_path / "project" / "in" / "day0.tsv"), day(0, 300))
    receive_now(cfg, incoming, None)
    manifest = read_manifest(str(tmp_path / "project" / "data"))
    assert manifest is not None and manifest["inputs"] == [str(tmp_path / "project" / "in" / "day0.tsv")]

    shutil.move(str(tmp_path / "project"), str(tmp_path / "moved"))
    cfg, incoming = project_config(str(tmp_path / "moved"))
    before = tree_state(tmp_path / "moved")
    again = receive_now(cfg, incoming, 0)  # no RunRecords: only the manifest's old paths
    assert again.imported == [] and again.new_generations == []
    assert changes(before, tree_state(tmp_path / "moved")) == []


def test_a_rewritten_file_is_new_data_and_a_copy_is_a_duplicate(tmp_path: Path, caplog: Any) -> None:
    cfg, incoming = project_config(str(tmp_path))
    inbox = tmp_path / "in"
    write(str(inbox / "day0.tsv"), day(0, 300))
    first = receive_now(cfg, incoming, None)
    earlier = RunRecords([r for r in map(ReceivedFile.from_json, first.received_files) if r], {})

    shutil.copy(inbox / "day0.tsv", inbox / "day0-again.tsv")
    write(str(inbox / "day0.tsv"), day(300, 50))  # the producer rewrote it with new edges
    with caplog.at_level(logging.INFO, logger="storage.retraining.arrivals"):
        second = receive_now(cfg, incoming, 0, earlier)
    assert second.imported == [str(inbox / "day0.tsv")] and second.new_generations == [1]
    assert second.edge_paths[-1] == str(tmp_path / "edges" / "gen0001-day0_partitioned")
    lines = [record.getMessage() for record in caplog.records]
    received_at = read_manifest(str(tmp_path / "data"))["generations"][0]["imported_at"]  # type: ignore[index]
    assert f"day0.tsv changed since it was received on {received_at} as generation 0: importing it as new data" in lines
    assert (
        f"day0-again.tsv holds the same bytes as day0.tsv, received on {received_at} as generation 0: "
        "skipped as a duplicate"
    ) in lines
    recorded = {(r["relative"], r["generation"]) for r in second.received_files}
    assert recorded == {("day0.tsv", 0), ("day0.tsv", 1)}


def test_a_holdout_gone_since_an_earlier_run_split_it_is_refused_before_any_write(tmp_path: Path) -> None:
    cfg, incoming = project_config(str(tmp_path))
    write(str(tmp_path / "in" / "day0.tsv"), day(0, 300))
    first = receive_now(cfg, incoming, None)
    [holdout] = first.holdouts
    fsspec.filesystem("file").rm(holdout, recursive=True)
    write(str(tmp_path / "in" / "day1.tsv"), day(300, 50))
    earlier = RunRecords([], {"gen0000-day0_holdout": "run-20260301T000000Z-0000000a"})
    before = tree_state(tmp_path)
    with pytest.raises(DataNotFound) as raised:
        receive_now(cfg, incoming, None, earlier)
    assert str(raised.value).startswith(
        f"{holdout}: the holdout of {first.edge_paths[0]} (import generation 0) is gone, though "
        "run-20260301T000000Z-0000000a's retrain.json records splitting it"
    )
    assert changes(before, tree_state(tmp_path)) == []
    # Dropping the day (its edge path too) is the documented way out: then it is no new data.
    fsspec.filesystem("file").rm(first.edge_paths[0], recursive=True)
    assert receive_now(cfg, incoming, None, earlier).new_generations == [1]


def test_a_project_with_relative_paths_moved_and_run_from_its_new_place(tmp_path: Path, monkeypatch: Any) -> None:
    """The deployment's style: every path relative to the working directory, the project directory."""
    (tmp_path / "project" / "in").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "project")
    cfg, incoming = project_config(".")
    write("in/day0.tsv", day(0, 300))
    first = receive_now(cfg, incoming, None)
    assert first.imported == [str(tmp_path / "project" / "in" / "day0.tsv")]  # listed: absolute
    earlier = RunRecords([r for r in map(ReceivedFile.from_json, first.received_files) if r], {})

    shutil.move(str(tmp_path / "project"), str(tmp_path / "moved"))
    monkeypatch.chdir(tmp_path / "moved")
    write("in/day1.tsv", day(300, 50))
    second = receive_now(cfg, incoming, 0, earlier)  # with retrain.json's records
    assert second.imported == [str(tmp_path / "moved" / "in" / "day1.tsv")] and second.new_generations == [1]
    assert second.edge_paths[0] == "./edges/gen0000-day0_partitioned"
    again = receive_now(cfg, incoming, 0)  # the manifest's paths alone: day 0's names nothing now
    assert again.imported == [] and again.new_generations == [1]
