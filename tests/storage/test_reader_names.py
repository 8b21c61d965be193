"""storage.reader_names: the names export labels rows with, and eval's check, on disk and on S3.

A checkpoint is committed over entity files, then the entity files are written again with the
names in other places, as a plain re-import leaves them; the readers must follow the record.
"""

from __future__ import annotations

import json

import pytest
import torch
from disk_state import changes, tree_state
from store_io import StorePath, all_files, get_bytes, join, put_bytes, put_text

from pbg_core.ports import CheckpointMetadata, NamesDigests
from storage.checkpoint_names import NamesArchive, NamesChangedError, current_digests, names_url
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.reader_names import check_positions, export_labels

KEYS = [("user", 0), ("user", 1), ("item", 0), ("item", 1)]
PARTS = {"user": 2, "item": 2}
OLD = {("user", 0): ["u0", "u1", "u2"], ("user", 1): ["u3", "u4"], ("item", 0): ["i0", "i1"], ("item", 1): ["i2"]}
# A plain re-import: u3 gone, u5 new, the others reshuffled across partitions; items moved within theirs.
NEW = {("user", 0): ["u4", "u2"], ("user", 1): ["u1", "u0", "u5"], ("item", 0): ["i1", "i0"], ("item", 1): ["i2"]}
RELATIONS_OLD, RELATIONS_NEW = ["likes", "buys", "sees"], ["sees", "likes", "owns"]


def plant(root: StorePath, names: dict[tuple[str, int], list[str]], relations: list[str] | None = None) -> EntityStore:
    """Entity files as ``pbg import`` writes them (indent 4)."""
    for (entity, part), listed in names.items():
        put_text(join(str(root), f"entity_names_{entity}_{part}.json"), json.dumps(listed, indent=4))
        put_text(join(str(root), f"entity_count_{entity}_{part}.txt"), f"{len(listed)}\n")
    if relations is not None:
        put_text(join(str(root), "dynamic_rel_names.json"), json.dumps(relations, indent=4))
        put_text(join(str(root), "dynamic_rel_count.txt"), f"{len(relations)}\n")
    return EntityStore(str(root))


def commit(root: StorePath, entities: EntityStore, record: bool = True, dynamic: bool = False) -> CheckpointStore:
    """Version 1 of ``root/ckpt`` over ``entities`` as a run writes it (``record=False``: as PBG does)."""
    store = CheckpointStore(str(root / "ckpt"))
    digests = current_digests(entities, KEYS, dynamic) if record else NamesDigests()
    if record:
        sources = {d: names_url(entities, *key) for key, d in digests.entities.items()}
        if digests.relations is not None:
            sources[digests.relations] = join(entities.url, "dynamic_rel_names.json")
        NamesArchive(store.url).keep(sources)
    metadata = CheckpointMetadata("{}", names=digests)
    for entity, part in KEYS:
        store.save_embeddings(entity, part, 1, torch.zeros(len(entities.load_names(entity, part)), 2), None, metadata)
    store.save_model(1, {}, {}, None, metadata)
    store.write_version(1)
    return store


def copied_without_names(source: CheckpointStore, target: StorePath) -> CheckpointStore:
    """Every file of ``source`` but its ``names/`` directory, copied to ``target``."""
    for relative in all_files(source.url):
        if not relative.startswith("names/"):
            put_bytes(join(str(target), relative), get_bytes(join(source.url, relative)))
    return CheckpointStore(str(target))


def test_an_export_after_a_reimport_labels_rows_with_the_recorded_names(root: StorePath) -> None:
    store = commit(root, plant(root / "data", OLD))
    entities = plant(root / "data", NEW)  # imported again: the entity files list other places now
    labels = export_labels(store, 1, entities, KEYS, dynamic=False)
    assert {key: labels.entities[key].load() for key in KEYS} == OLD
    assert all(f"{store.url}/names/" in found.url for found in labels.entities.values())
    assert labels.unrecorded == () and labels.relations is None


def test_without_the_checkpoint_names_the_entity_files_serve_only_while_they_match(root: StorePath) -> None:
    entities = plant(root / "data", OLD)
    store = copied_without_names(commit(root, entities), root / "copy")
    labels = export_labels(store, 1, entities, KEYS, dynamic=False)
    assert {key: labels.entities[key].load() for key in KEYS} == OLD
    assert labels.entities[("user", 0)].url == names_url(entities, "user", 0)
    plant(root / "data", NEW)
    before = tree_state(str(root))
    with pytest.raises(NamesChangedError) as refused:
        export_labels(store, 1, entities, KEYS, dynamic=False)
    message = str(refused.value)
    assert "\n" not in message and "entity type 'user' partition 0" in message
    assert "embeddings_user_0.v1.h5" in message and "is missing" in message and "lists other names now" in message
    assert changes(before, tree_state(str(root))) == []


def test_rows_without_a_record_are_labelled_by_position_from_the_entity_files(root: StorePath) -> None:
    entities = plant(root / "data", OLD)
    store = commit(root, entities, record=False)
    plant(root / "data", NEW)
    labels = export_labels(store, 1, entities, KEYS, dynamic=False)
    assert labels.unrecorded == ("entity type 'user'", "entity type 'item'")
    assert {key: labels.entities[key].load() for key in KEYS} == NEW  # as PBG labels them


def test_dynamic_relation_types_follow_the_model_files_record(root: StorePath) -> None:
    store = commit(root, plant(root / "data", OLD, RELATIONS_OLD), dynamic=True)
    entities = plant(root / "data", NEW, RELATIONS_NEW)
    labels = export_labels(store, 1, entities, KEYS, dynamic=True)
    assert labels.relations is not None and labels.relations.load() == RELATIONS_OLD
    bare = copied_without_names(store, root / "copy")
    with pytest.raises(NamesChangedError, match=r"the relation parameters' rows belong .*model\.v1\.h5"):
        export_labels(bare, 1, entities, [], dynamic=True)


def test_eval_passes_rows_whose_names_stayed_on_digests_alone(root: StorePath) -> None:
    entities = plant(root / "data", OLD)
    store = commit(root, entities)
    assert check_positions(store, 1, entities, PARTS, dynamic=False, reader="pbg eval").same
    # The same lists written otherwise (another digest): read, found equal, not refused.
    for key, listed in OLD.items():
        put_text(names_url(entities, *key), json.dumps(listed))
    check = check_positions(store, 1, entities, PARTS, dynamic=False, reader="pbg eval")
    assert check.same and check.unchecked == ()


def test_eval_refuses_rows_whose_names_moved_counting_them(root: StorePath) -> None:
    store = commit(root, plant(root / "data", OLD, RELATIONS_OLD), dynamic=True)
    entities = plant(root / "data", NEW, RELATIONS_NEW)
    before = tree_state(str(root))
    with pytest.raises(NamesChangedError) as refused:
        check_positions(store, 1, entities, PARTS, dynamic=True, reader="pbg eval")
    message = str(refused.value)
    assert "\n" not in message and f"checkpoint_path {store.url} version 1 was trained on other names" in message
    assert "entity type 'item': 2 of 3 names moved, 0 new, 0 gone" in message
    assert "entity type 'user': 4 of 5 names moved, 1 new, 1 gone" in message
    assert "relation types: 2 of 3 moved, 1 new, 1 gone" in message
    assert "pbg eval would rank each moved row" in message and f"init_path={store.url}" in message
    assert changes(before, tree_state(str(root))) == []
    # Only the types the reader ranks count: items alone moved within their partitions here.
    moved_items = {**OLD, ("item", 0): ["i1", "i0"]}
    plant(root / "data", moved_items, RELATIONS_OLD)
    assert check_positions(store, 1, entities, {"user": 2}, dynamic=True, reader="pbg eval").same
    with pytest.raises(NamesChangedError, match="entity type 'item': 2 of 3 names moved"):
        check_positions(store, 1, entities, PARTS, dynamic=True, reader="pbg eval")


def test_eval_uses_rows_without_a_record_by_position(root: StorePath) -> None:
    entities = plant(root / "data", OLD)
    store = commit(root, entities, record=False)
    plant(root / "data", NEW)
    check = check_positions(store, 1, entities, PARTS, dynamic=False, reader="pbg eval")
    assert check.same and check.unchecked == ("entity type 'item'", "entity type 'user'")
