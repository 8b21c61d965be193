"""Appending imports: old names keep their (partition, offset), new ones join, the same append is done once."""

from __future__ import annotations

import json

import pytest
from import_cases import make_config, read_back, write_tsv
from store_io import StorePath

from pbg_core.config import ConfigSchema
from pbg_core.errors import ConfigError
from storage.entities import EntityStore
from storage.errors import DataNotFound, OutputExistsError
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions


def names_by_part(config: ConfigSchema, entity: str) -> list[list[str]]:
    store = EntityStore(config.entity_path)
    return [store.load_names(entity, part) for part in range(config.entities[entity].num_partitions)]


def test_an_append_keeps_every_old_name_in_place_and_maps_new_edges_to_both(root: StorePath) -> None:
    day0 = make_config(root, {"user": 2}, [("follows", "user", "user")])
    import_edges(
        day0,
        [write_tsv(root / "day0.tsv", ["a b", "b c", "c d", "d e", "e a", "f a"])],
        ImportOptions(lhs_col=0, rhs_col=1),
        seed=1,
    )
    before = names_by_part(day0, "user")

    day1 = make_config(root, {"user": 2}, [("follows", "user", "user")], edge_paths=[str(root / "edges-day1")])
    lines = ["a x", "x y", "y b", "z z2", "c a"]
    report = import_edges(
        day1, [write_tsv(root / "day1.tsv", lines)], ImportOptions(lhs_col=0, rhs_col=1, append=True), seed=2
    )
    after = names_by_part(day1, "user")

    for part in range(2):
        assert after[part][: len(before[part])] == before[part]  # nothing already written moved
    new = sorted(name for part in range(2) for name in after[part][len(before[part]) :])
    assert new == ["x", "y", "z", "z2"]
    assert sorted(len(p) for p in after) == [5, 5]  # 3 + 3 old, 4 new: the sizes end even
    assert report.entity_counts == {"user": 10}
    assert sorted((l, r) for l, _, r, _ in read_back(day1)) == sorted(tuple(x.split()) for x in lines)
    assert sorted((l, r) for l, _, r, _ in read_back(day0)) == sorted(
        [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "a"), ("f", "a")]
    )  # the old edge files still name the same entities


def test_the_same_append_twice_does_nothing_the_second_time(root: StorePath) -> None:
    day0 = make_config(root, {"user": 1}, [("follows", "user", "user")])
    import_edges(day0, [write_tsv(root / "day0.tsv", ["a b", "b c"])], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    day1 = make_config(root, {"user": 1}, [("follows", "user", "user")], edge_paths=[str(root / "edges-day1")])
    src = write_tsv(root / "day1.tsv", ["c d", "d e"])
    first = import_edges(day1, [src], ImportOptions(lhs_col=0, rhs_col=1, append=True), seed=0)
    names = names_by_part(day1, "user")
    second = import_edges(day1, [src], ImportOptions(lhs_col=0, rhs_col=1, append=True), seed=0)
    assert first.unchanged_since is None and second.unchanged_since is not None
    assert names_by_part(day1, "user") == names  # the second append wrote nothing
    assert sorted(names[0]) == ["a", "b", "c", "d", "e"] and len(names[0]) == 5
    manifest = json.loads((root / "entities" / "import_manifest.json").read_text())
    assert [g["generation"] for g in manifest["generations"]] == [0, 1]
    assert manifest["generations"][1]["edge_paths"] == [str(root / "edges-day1")]


def test_an_append_that_does_not_fit_the_import_is_refused_before_reading_inputs(root: StorePath) -> None:
    day0 = make_config(root, {"user": 2}, [("follows", "user", "user")])
    import_edges(day0, [write_tsv(root / "day0.tsv", ["a b", "b c"])], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    before = names_by_part(day0, "user")
    other = make_config(root, {"user": 4}, [("follows", "user", "user")], edge_paths=[str(root / "edges-day1")])
    malformed = write_tsv(root / "never-read.tsv", ["a"])  # read, it would fail as a short line
    with pytest.raises(ConfigError, match="entities.user: the import being appended to has 2 partition"):
        import_edges(other, [malformed], ImportOptions(lhs_col=0, rhs_col=1, append=True))
    assert names_by_part(day0, "user") == before


def test_an_append_with_no_import_there_says_so(root: StorePath) -> None:
    config = make_config(root, {"user": 1}, [("follows", "user", "user")])
    with pytest.raises(DataNotFound, match="no import to append to"):
        import_edges(config, [write_tsv(root / "d.tsv", ["a b"])], ImportOptions(lhs_col=0, rhs_col=1, append=True))


def test_new_dynamic_relations_are_appended_after_the_old_ones(root: StorePath) -> None:
    day0 = make_config(root, {"e": 1}, [("r", "e", "e")], dynamic_relations=True, global_emb=False)
    import_edges(
        day0,
        [write_tsv(root / "day0.tsv", ["a likes b", "b knows c"])],
        ImportOptions(lhs_col=0, rhs_col=2, rel_col=1),
        seed=0,
    )
    old = EntityStore(day0.entity_path).load_dynamic_relation_names()
    day1 = make_config(
        root,
        {"e": 1},
        [("r", "e", "e")],
        dynamic_relations=True,
        global_emb=False,
        edge_paths=[str(root / "edges-day1")],
    )
    lines = ["c hates a", "a likes d"]
    report = import_edges(
        day1, [write_tsv(root / "day1.tsv", lines)], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, append=True), seed=0
    )
    names = EntityStore(day1.entity_path).load_dynamic_relation_names()
    assert names[: len(old)] == old and names[len(old) :] == ["hates"]
    assert report.generation == 1 and report.new_entities == {"e": 1} and report.relation_count == 3
    assert "appended as generation 1; new entities e: 1" in str(report)
    assert sorted((lhs, rel, rhs) for lhs, rel, rhs, _ in read_back(day1)) == sorted(tuple(x.split()) for x in lines)


def test_a_plain_import_over_an_appended_import_is_refused_unless_forced(root: StorePath) -> None:
    day0 = make_config(root, {"user": 1}, [("follows", "user", "user")])
    src = write_tsv(root / "day0.tsv", ["a b", "b c"])
    import_edges(day0, [src], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    day1 = make_config(root, {"user": 1}, [("follows", "user", "user")], edge_paths=[str(root / "edges-day1")])
    import_edges(
        day1, [write_tsv(root / "day1.tsv", ["c d"])], ImportOptions(lhs_col=0, rhs_col=1, append=True), seed=0
    )
    grown = names_by_part(day1, "user")
    with pytest.raises(OutputExistsError, match=r"grown by 1 append\(s\).*--append to add edges.*--force to replace"):
        import_edges(day0, [src], ImportOptions(lhs_col=0, rhs_col=1), seed=0)
    assert names_by_part(day0, "user") == grown
    import_edges(day0, [src], ImportOptions(lhs_col=0, rhs_col=1, force=True), seed=0)
    assert sorted(names_by_part(day0, "user")[0]) == ["a", "b", "c"]
