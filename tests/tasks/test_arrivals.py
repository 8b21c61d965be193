"""tasks.arrivals: what a retraining run imports, what is new to it, and its holdouts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec

from pbg_core.config import parse_config
from storage.holdout import holdout_path_of
from storage.importing.manifest import read_manifest
from tasks.arrivals import edge_path_for, list_files, receive
from tasks.retrain_options import IncomingOptions

OPTIONS = {"lhs_col": 0, "rhs_col": 1}


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
    first = receive(cfg, incoming, None, 0, OPTIONS)
    assert first.imported == [f"{store_root}/in/day0.tsv"] and first.generation == 0 and first.new_generations == [0]
    gen0 = f"{store_root}/edges/gen0000-day0_partitioned"
    assert first.edge_paths == [gen0] and first.holdouts == [holdout_path_of(gen0)]

    write(f"{store_root}/in/day1.tsv", day(400, 100))
    second = receive(cfg, incoming, 0, 0, OPTIONS)  # the starting run trained generation 0
    gen1 = f"{store_root}/edges/gen0001-day1_partitioned"
    assert second.imported == [f"{store_root}/in/day1.tsv"] and second.new_generations == [1]
    assert second.edge_paths == [gen0, gen1] and second.holdouts == [holdout_path_of(gen1)]
    manifest = read_manifest(f"{store_root}/data")
    assert manifest is not None and [g["generation"] for g in manifest["generations"]] == [0, 1]

    third = receive(cfg, incoming, 1, 0, OPTIONS)
    assert third.imported == [] and third.new_generations == [] and third.holdouts == []
    retried = receive(cfg, incoming, 0, 0, OPTIONS)  # generation 1 not yet trained by a passing run: still new
    assert retried.imported == [] and retried.new_generations == [1] and retried.holdouts == second.holdouts


def test_a_glob_matching_nothing_imports_nothing(tmp_path: Path) -> None:
    cfg = config(str(tmp_path))
    incoming = IncomingOptions(inputs=str(tmp_path / "in" / "*.tsv"), edges_dir=str(tmp_path / "edges"))
    received = receive(cfg, incoming, None, 0, OPTIONS)
    assert received.imported == [] and received.new_generations == [] and not (tmp_path / "data").exists()


def test_an_import_done_by_hand_is_recognised_and_a_dropped_day_is_no_new_data(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from storage.importing.importer import import_edges

    monkeypatch.chdir(tmp_path)
    cfg = config(str(tmp_path))
    write(str(tmp_path / "in" / "day0.tsv"), day(0, 300))
    by_hand = cfg.model_copy(update={"edge_paths": [str(tmp_path / "edges" / "gen0000-day0_partitioned")]})
    import_edges(by_hand, ["in/day0.tsv"], seed=0, **OPTIONS)  # a relative spelling of the same file
    incoming = IncomingOptions(inputs=str(tmp_path / "in"), edges_dir=str(tmp_path / "edges"))
    received = receive(cfg, incoming, 0, 0, OPTIONS)
    assert received.imported == [] and received.new_generations == []

    write(str(tmp_path / "in" / "day1.tsv"), day(300, 50))
    grown = receive(cfg, incoming, 0, 0, OPTIONS)
    assert grown.new_generations == [1]
    for path in (grown.edge_paths[1], grown.holdouts[0]):
        fsspec.filesystem("file").rm(path, recursive=True)  # the bad day dropped
    again = receive(cfg, incoming, 0, 0, OPTIONS)
    assert again.new_generations == [] and len(again.edge_paths) == 1
