"""storage.importing.edge_paths: an edge path is never written twice unless --force, and the report
counts what the bucket files hold."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from disk_state import changes, tree_state
from import_cases import make_config, write_tsv
from store_io import StorePath

from storage.errors import OutputExistsError, StorageError
from storage.importing.edge_paths import edge_path_key, edges_on_disk
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions

DAY0 = [f"u{i} u{(i * 7 + 3) % 40}" for i in range(40)]
DAY1 = ["u1 new1", "new1 new2", "new2 u3"]


def config_with(root: StorePath, edge_paths: list[str], partitions: int = 2) -> Any:
    return make_config(root, {"user": partitions}, [("follows", "user", "user")], edge_paths=edge_paths)


def run(config: Any, inputs: list[str], **options: Any) -> Any:
    return import_edges(config, inputs, ImportOptions(lhs_col=0, rhs_col=1, **options), seed=0)


def bucket_lengths(edge_path: Path) -> int:
    total = 0
    for file in edge_path.glob("edges_*.h5"):
        with h5py.File(file, "r") as hf:
            total += len(hf["lhs"])
    return total


def test_an_edge_path_is_known_by_where_it_is_not_how_it_is_spelled(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    spellings = ["data/x", "./data/x/", "data//x", str(tmp_path / "data" / "x"), f"file://{tmp_path}/data/x"]
    assert len({edge_path_key(s) for s in spellings}) == 1
    assert edge_path_key("data/y") != edge_path_key("data/x")
    assert edge_path_key("s3://bucket/a/../x/") == edge_path_key("s3://bucket/x")


def test_two_inputs_given_one_edge_path_are_refused_naming_both(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    root = StorePath(str(tmp_path))
    a, b = write_tsv(root / "a.tsv", DAY0), write_tsv(root / "b.tsv", DAY1)
    run(config_with(root, [str(tmp_path / "edges" / "first")]), [a])
    before = tree_state(tmp_path)
    config = config_with(root, ["edges/day", "./edges/day/"])
    with pytest.raises(OutputExistsError) as refused:
        run(config, [a, b], force=False)
    message = str(refused.value)
    assert message.startswith("edges/day: is the edge path of two inputs, ")
    assert f"{a} (edge_paths[0]) and {b} (edge_paths[1])" in message and "--force to write both" in message
    assert changes(before, tree_state(tmp_path)) == []


def test_with_force_two_inputs_fill_one_edge_path_and_the_report_counts_what_it_holds(root: StorePath) -> None:
    config = config_with(root, [str(root / "edges"), str(root / "edges/")])
    a, b = write_tsv(root / "a.tsv", DAY0), write_tsv(root / "b.tsv", DAY1)
    report = run(config, [a, b], force=True)
    assert report.edges_written == [40, 3]
    assert report.edges_on_disk == {str(root / "edges"): 43}
    assert edges_on_disk(str(root / "edges")) == 43
    assert "imported 43 of 43 edges" in str(
        report
    ) and f"per edge path (several inputs into one, --force): {root / 'edges'}: 43" in str(report)


def test_an_append_onto_the_training_edges_is_refused_naming_their_generation(root: StorePath) -> None:
    """The reported case: --append without new edge_paths rewrote 5,216 training edges as 60."""
    config = config_with(root, [str(root / "train")])
    run(config, [write_tsv(root / "day0.tsv", DAY0)])
    day1 = write_tsv(root / "day1.tsv", DAY1)
    before = tree_state(str(root))
    with pytest.raises(OutputExistsError) as refused:
        run(config, [day1], append=True)
    message = str(refused.value)
    assert message.startswith(
        f"{root / 'train'}: already holds 40 edges, written by generation 0 (the import, imported "
    )
    assert "an append never replaces them" in message and "-p 'edge_paths=[" in message and "--force" in message
    assert changes(before, tree_state(str(root))) == []


def test_with_force_an_append_replaces_an_earlier_generations_edges_and_says_so(root: StorePath) -> None:
    config = config_with(root, [str(root / "train")])
    run(config, [write_tsv(root / "day0.tsv", DAY0)])
    day1 = config_with(root, [str(root / "day1")])
    run(day1, [write_tsv(root / "day1.tsv", DAY1)], append=True)
    report = run(config, [write_tsv(root / "day2.tsv", DAY1[:2])], append=True, force=True)
    assert report.generation == 2 and report.edges_on_disk == {str(root / "train"): 2}
    assert report.replaced == [f"{root / 'train'} (40 edges of generation 0)"]
    assert f"replaced, with --force, the edges of earlier generations at: {root / 'train'} (40 edges" in str(report)
    manifest = json.loads((root / "entities" / "import_manifest.json").read_text())
    first, second, third = manifest["generations"]
    assert first["edge_paths"] == [] and first["replaced"] == [{"edge_path": str(root / "train"), "by_generation": 2}]
    assert second["edge_paths"] == [str(root / "day1")] and "replaced" not in second
    assert third["replaces"] == [{"edge_path": str(root / "train"), "generation": 0, "edges": 40}]
    assert third["edge_paths"] == [str(root / "train")]


def test_an_append_onto_edges_no_generation_records_is_refused(tmp_path: Path) -> None:
    root = StorePath(str(tmp_path))
    config = config_with(root, [str(tmp_path / "train")])
    run(config, [write_tsv(root / "day0.tsv", DAY0)])
    (tmp_path / "entities" / "import_manifest.json").unlink()  # as after PBG's importer
    other = config_with(root, [str(tmp_path / "train")])
    with pytest.raises(OutputExistsError, match="written by an import this entity_path's manifest does not record"):
        run(other, [write_tsv(root / "day1.tsv", DAY1)], append=True)


def test_an_edge_path_changed_under_the_commit_fails_the_import_and_undoes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the report counts is read back from the bucket files: another writer there is caught."""
    root = StorePath(str(tmp_path))
    config = config_with(root, [str(tmp_path / "edges")], partitions=1)
    pause = tmp_path / "paused"
    monkeypatch.setenv("PBG_PAUSE_AT", "import-move:1")  # after the edge path's one bucket file moved in
    monkeypatch.setenv("PBG_PAUSE_FILE", str(pause))
    failure: list[BaseException] = []

    def importing() -> None:
        try:
            run(config, [write_tsv(root / "day0.tsv", DAY0)])
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=importing)
    thread.start()
    while not pause.exists():
        assert thread.is_alive(), failure
        thread.join(0.02)
    with h5py.File(tmp_path / "edges" / "edges_0_0.h5", "a") as hf:  # another program rewrites it meanwhile
        for name in ("lhs", "rhs", "rel"):
            data = np.concatenate([hf[name][...], [0]])
            del hf[name]
            hf[name] = data
    pause.unlink()
    thread.join()
    assert len(failure) == 1 and isinstance(failure[0], StorageError)
    assert "its bucket files hold 41 edges after the import moved them in, but 40 were written" in str(failure[0])
    assert not (tmp_path / "edges").exists() and not (tmp_path / "entities").exists()  # undone


def test_edges_on_disk_reads_the_lengths_on_each_store(root: StorePath) -> None:
    config = config_with(root, [str(root / "edges")])
    run(config, [write_tsv(root / "day0.tsv", DAY0)])
    assert edges_on_disk(str(root / "edges")) == 40
    if not str(root).startswith("s3://"):
        assert bucket_lengths(Path(str(root)) / "edges") == 40
