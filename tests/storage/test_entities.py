"""Tests for storage.entities: PBG-format entity counts, names and dynamic relations."""

from __future__ import annotations

import pytest
from store_io import StorePath

from storage.entities import EntityStore
from storage.errors import BadDataError, DataNotFound


def test_count_round_trip_and_pbg_bytes(root: StorePath) -> None:
    store = EntityStore(str(root))
    assert not store.has_count("user", 0)
    store.save_count("user", 0, 42)
    assert store.has_count("user", 0)
    assert store.load_count("user", 0) == 42
    assert (root / "entity_count_user_0.txt").read_text() == "42\n"


def test_count_reads_pbg_files_via_file_url(root: StorePath) -> None:
    (root / "entity_count_item_3.txt").write_text("7")  # no newline is fine too
    assert EntityStore(str(root) if root.is_s3 else f"file://{root}").load_count("item", 3) == 7


@pytest.mark.parametrize("content", ["abc", "-3", "1 2", "", "3.5"])
def test_bad_count_names_file_and_content(root: StorePath, content: str) -> None:
    (root / "entity_count_user_0.txt").write_text(content)
    with pytest.raises(BadDataError) as info:
        EntityStore(str(root)).load_count("user", 0)
    assert f"entity_count_user_0.txt: expected one non-negative integer, got {content!r}" in str(info.value)
    assert str(root) in str(info.value)
    assert str(info.value).count("entity_count_user_0.txt") == 1  # the file's URL names it; the problem does not again


def test_missing_count_is_data_not_found(root: StorePath) -> None:
    with pytest.raises(DataNotFound, match="entity_count_user_1.txt"):
        EntityStore(str(root)).load_count("user", 1)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_save_count_rejects_non_counts(root: StorePath, bad: object) -> None:
    with pytest.raises(ValueError, match="non-negative int"):
        EntityStore(str(root)).save_count("user", 0, bad)


def test_names_round_trip_with_pbg_indent(root: StorePath) -> None:
    store = EntityStore(str(root))
    store.save_names("user", 1, ["alice", "bob", "ünï"])
    assert store.load_names("user", 1) == ["alice", "bob", "ünï"]
    # json.dump(names, f, indent=4) as PBG writes it: no trailing newline.
    assert (root / "entity_names_user_1.json").read_text(encoding="utf-8") == (
        '[\n    "alice",\n    "bob",\n    "\\u00fcn\\u00ef"\n]'
    )


def test_bad_names_file(root: StorePath) -> None:
    store = EntityStore(str(root))
    (root / "entity_names_user_0.json").write_text('{"a": 1}')
    with pytest.raises(BadDataError, match="expected a JSON list of strings"):
        store.load_names("user", 0)
    (root / "entity_names_user_0.json").write_text('["a", 3]')
    with pytest.raises(BadDataError, match="entity_names_user_0.json"):
        store.load_names("user", 0)
    (root / "entity_names_user_0.json").write_text('["a",')
    with pytest.raises(BadDataError, match="invalid JSON at line 1"):
        store.load_names("user", 0)


def test_dynamic_relations_round_trip(root: StorePath) -> None:
    store = EntityStore(str(root))
    store.save_dynamic_relation_count(3)
    store.save_dynamic_relation_names(["r0", "r1", "r2"])
    assert store.load_dynamic_relation_count() == 3
    assert store.load_dynamic_relation_names() == ["r0", "r1", "r2"]
    assert (root / "dynamic_rel_count.txt").read_text() == "3\n"
    assert sorted(p.name for p in root.iterdir()) == ["dynamic_rel_count.txt", "dynamic_rel_names.json"]
