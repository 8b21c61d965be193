"""storage.checkpoint_names: the names record on checkpoint files and the names kept with them, on disk and on S3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from store_io import StorePath, all_files, get_bytes, join, put_text, read_h5

from pbg_core.ports import CheckpointMetadata, NamesDigests, VersionLayout
from storage.checkpoint_names import (
    DIGEST_ATTR,
    NamesArchive,
    NamesChangedError,
    compare,
    current_digests,
    read_digest,
    recorded_digests,
)
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore

KEYS = [("user", 0), ("user", 1), ("item", 0)]


def plant_names(
    root: StorePath, names: dict[tuple[str, int], list[str]], relations: list[str] | None = None
) -> EntityStore:
    """Entity files as ``pbg import`` writes them (indent 4)."""
    for (entity, part), listed in names.items():
        put_text(join(str(root), f"entity_names_{entity}_{part}.json"), json.dumps(listed, indent=4))
        put_text(join(str(root), f"entity_count_{entity}_{part}.txt"), f"{len(listed)}\n")
    if relations is not None:
        put_text(join(str(root), "dynamic_rel_names.json"), json.dumps(relations, indent=4))
    return EntityStore(str(root))


NAMES = {("user", 0): ["u3", "u1"], ("user", 1): ["u0", "u2"], ("item", 0): ["i0", "i1", "i2"]}


def test_equal_names_have_equal_digests_and_a_reshuffle_changes_them(root: StorePath) -> None:
    first = current_digests(plant_names(root / "a", NAMES), KEYS, dynamic=False)
    again = current_digests(plant_names(root / "b", NAMES), KEYS, dynamic=False)
    shuffled = current_digests(plant_names(root / "c", {**NAMES, ("user", 0): ["u1", "u3"]}), KEYS, dynamic=False)
    assert first == again and set(first.entities) == set(KEYS) and first.relations is None
    assert shuffled.entities[("user", 0)] != first.entities[("user", 0)]
    assert shuffled.entities[("user", 1)] == first.entities[("user", 1)]


def test_a_key_without_a_names_file_has_no_digest(root: StorePath) -> None:
    entities = plant_names(root, {("user", 0): ["u0"]}, relations=["likes"])
    found = current_digests(entities, KEYS, dynamic=True)
    assert set(found.entities) == {("user", 0)} and found.relations is not None


def test_checkpoint_files_carry_the_digest_of_their_names_and_files_without_one_have_none(root: StorePath) -> None:
    store = CheckpointStore(str(root / "ckpt"))
    names = NamesDigests(entities={("user", 0): "abc123"}, relations="rel456")
    meta = CheckpointMetadata(config_json="{}", names=names)
    store.save_embeddings("user", 0, 2, torch.zeros(2, 3), None, meta)
    store.save_embeddings("user", 1, 2, torch.zeros(2, 3), None, meta)  # no digest for this key
    store.save_model(2, {}, {}, None, meta)
    with read_h5(join(store.url, "embeddings_user_0.v2.h5")) as hf:
        assert hf.attrs[DIGEST_ATTR] == "abc123"
    recorded = recorded_digests(store.url, 2, [("user", 0), ("user", 1), ("item", 0)], dynamic=True)
    assert recorded == NamesDigests(entities={("user", 0): "abc123"}, relations="rel456")
    assert read_digest(join(store.url, "embeddings_item_0.v2.h5")) is None  # missing file: no record


def test_names_are_kept_once_per_digest_and_others_removed(root: StorePath) -> None:
    entities = plant_names(root / "data", NAMES)
    digests = current_digests(entities, KEYS, dynamic=False)
    sources = {d: join(entities.url, f"entity_names_{e}_{p}.json") for (e, p), d in digests.entities.items()}
    archive = NamesArchive(str(root / "ckpt"))
    assert archive.keep(sources) == 3 and archive.digests() == set(sources)
    assert archive.load(digests.entities[("user", 1)]) == ["u0", "u2"]
    kept_bytes = get_bytes(archive.file_url(digests.entities[("item", 0)]))
    assert archive.keep(sources) == 0  # already there: nothing written again
    assert get_bytes(archive.file_url(digests.entities[("item", 0)])) == kept_bytes
    gone = archive.remove_except({digests.entities[("user", 0)]})
    assert len(gone) == 2 and archive.digests() == {digests.entities[("user", 0)]}


def test_a_snapshot_keeps_the_names_of_its_rows(root: StorePath) -> None:
    entities = plant_names(root / "data", NAMES)
    digests = current_digests(entities, KEYS, dynamic=False)
    store = CheckpointStore(str(root / "ckpt"))
    NamesArchive(store.url).keep(
        {d: join(entities.url, f"entity_names_{e}_{p}.json") for (e, p), d in digests.entities.items()}
    )
    meta = CheckpointMetadata(config_json="{}", names=digests)
    for entity, part in KEYS:
        store.save_embeddings(entity, part, 4, torch.zeros(len(NAMES[(entity, part)]), 2), None, meta)
    store.save_model(4, {}, {}, None, meta)
    layout = VersionLayout.of({key: len(NAMES[key]) for key in KEYS}, {"user": 2, "item": 2})
    store.preserve_version(store.check_complete(4, layout), 2)
    snapshot = join(store.url, "epoch_2")
    assert sorted(f for f in all_files(snapshot) if f.startswith("names/")) == sorted(
        f"names/{d}.json" for d in digests.entities.values()
    )
    assert recorded_digests(snapshot, 4, KEYS, dynamic=False) == digests
    assert NamesArchive(snapshot).load(digests.entities[("user", 0)]) == ["u3", "u1"]


def test_compare_tells_moved_types_from_unrecorded_ones() -> None:
    keys = [("user", 0), ("user", 1), ("item", 0), ("tag", 0)]
    recorded = NamesDigests(entities={("user", 0): "a", ("user", 1): "b", ("item", 0): "c"}, relations="r")
    current = NamesDigests(
        entities={("user", 0): "a", ("user", 1): "B", ("item", 0): "c", ("tag", 0): "t"}, relations="r"
    )
    check = compare(recorded, current, keys, dynamic=True)
    assert check.changed == ("user",) and not check.relations_changed and not check.same
    assert check.unchecked == ("entity type 'tag'",)  # no record: by position
    same = compare(recorded, recorded, keys[:3], dynamic=True)
    assert same.same and same.unchecked == ()
    relations = compare(recorded, NamesDigests(entities=recorded.entities, relations="R"), keys[:3], dynamic=True)
    assert relations.relations_changed and relations.changed == ()
    unrecorded = compare(NamesDigests(), current, keys, dynamic=True)
    assert unrecorded.same and len(unrecorded.unchecked) == 4  # three types and the relation types


def test_a_copy_that_does_not_hold_its_digest_is_refused_and_removed(tmp_path: Path) -> None:
    source = tmp_path / "entity_names_user_0.json"
    source.write_text('["u0"]')  # another content than the digest below was taken of (replaced meanwhile)
    archive = NamesArchive(str(tmp_path / "ckpt"))
    with pytest.raises(NamesChangedError, match="changed while it was copied"):
        archive.keep({"0" * 32: str(source)})
    assert archive.digests() == set()
