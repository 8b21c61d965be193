"""storage.remap.prepare, .start and .moved: a run's start from init_path by name, on disk and on S3."""

from __future__ import annotations

import zlib
from collections.abc import Mapping

import pytest
import torch
from store_io import StorePath, all_files, get_bytes, join

from pbg_core.ports import CheckpointMetadata
from pbg_core.training.optimizers import RowAdagrad, state_to_bytes
from storage.checkpoint_names import (
    NamesArchive,
    NamesChangedError,
    compare,
    current_digests,
    names_url,
    recorded_digests,
)
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.remap.moved import what_moved
from storage.remap.prepare import RunShape, prepare_start
from storage.remap.start import InitByName, StartDir, init_rows

Names = Mapping[tuple[str, int], list[str]]
OLD: Names = {
    ("user", 0): ["u0", "u1", "u2"],
    ("user", 1): ["u3", "u4"],
    ("item", 0): ["i0", "i1"],
    ("item", 1): ["i2"],
    ("tag", 0): ["t0", "t1"],
}
# A plain re-import: users reshuffled across partitions (u1 gone, u9 new); items appended to; tags the same.
NOW: Names = {
    ("user", 0): ["u4", "u9", "u0"],
    ("user", 1): ["u2", "u3"],
    ("item", 0): ["i0", "i1", "i7"],
    ("item", 1): ["i2"],
    ("tag", 0): ["t0", "t1"],
}
KEYS = sorted(OLD)
PARTS = {"user": 2, "item": 2, "tag": 1}


def row_of(name: str) -> list[float]:
    """A recognisable trained row per name."""
    value = float(zlib.crc32(name.encode()) % 1000)
    return [value, -value, value / 2]


def entity_files(root: StorePath, names: Names, relations: list[str] | None = None) -> EntityStore:
    store = EntityStore(str(root))
    for (entity, part), listed in names.items():
        store.save_names(entity, part, listed)
        store.save_count(entity, part, len(listed))
    if relations is not None:
        store.save_dynamic_relation_names(relations)
    return store


def trained_checkpoint(root: StorePath, names: Names, relations: list[str] | None = None) -> CheckpointStore:
    """A checkpoint at version 5 whose rows are ``row_of`` their names, with its names record."""
    entities = entity_files(root / "old-data", names, relations)
    digests = current_digests(entities, KEYS, dynamic=relations is not None)
    store = CheckpointStore(str(root / "init"))
    sources = {d: names_url(entities, *key) for key, d in digests.entities.items()}
    if relations is not None:
        assert digests.relations is not None
        sources[digests.relations] = join(entities.url, "dynamic_rel_names.json")
    NamesArchive(store.url).keep(sources)
    meta = CheckpointMetadata(config_json="{}", names=digests)
    for (entity, part), listed in names.items():
        rows = torch.tensor([row_of(name) for name in listed])
        sums = torch.arange(len(listed), dtype=torch.float32) + 1
        store.save_embeddings(entity, part, 5, rows, state_to_bytes(RowAdagrad.state_dict(sums)), meta)
    if relations is not None:
        params = {"lhs_operators.0.translations": torch.tensor([row_of(r) for r in relations])}
        store.save_model(
            5, params, {"lhs_operators.0.translations": "relations/0/operator/lhs/translations"}, None, meta
        )
    store.write_version(5)
    return store


def shape_for(entities: EntityStore, dynamic: bool = False) -> RunShape:
    def fresh_model(count: int) -> dict[str, torch.Tensor]:
        return {"lhs_operators.0.translations": torch.full((count, 3), 0.25)}

    return RunShape(
        num_partitions=PARTS,
        counts={key: entities.load_count(*key) for key in KEYS},
        dimensions=dict.fromkeys(PARTS, 3),
        seed=0,
        lr=0.1,
        start=lambda entity, part, rows: rows.fill_(-7.0),
        fresh_model=fresh_model if dynamic else None,
    )


def prepared(root: StorePath, dynamic_relations: tuple[list[str], list[str]] | None = None):  # type: ignore[no-untyped-def]
    old_relations, new_relations = dynamic_relations or (None, None)
    init = trained_checkpoint(root, OLD, old_relations)
    entities = entity_files(root / "data", NOW, new_relations)
    dynamic = dynamic_relations is not None
    current = current_digests(entities, KEYS, dynamic)
    recorded = recorded_digests(init.url, 5, KEYS, dynamic)
    check = compare(recorded, current, KEYS, dynamic)
    start = StartDir(str(root / "run"))
    return init, entities, start, current, (recorded, current, check), shape_for(entities, dynamic)


def test_moved_entities_start_from_their_rows_the_rest_from_init_path_by_position(root: StorePath) -> None:
    init, entities, start, current, names, shape = prepared(root)
    assert names[2].changed == ("item", "user")
    done = prepare_start(init, entities, start, shape, names)
    assert done.remapped == ("user",) and not done.reused  # items were appended to: positions hold
    assert (done.entities.kept, done.entities.new, done.entities.dropped) == (9, 2, 1)
    assert "9 of 11 entities kept their trained rows, 2 new (random), 1 dropped" in done.line("random")
    files = all_files(start.url)
    assert "embeddings_user_0.v5.h5" in files and not any(f.startswith("embeddings_item") for f in files)
    reader = init_rows(init, start, current, KEYS, dynamic=False)
    assert isinstance(reader, InitByName) and reader.read_version() == 5
    for (entity, part), listed in NOW.items():
        rows, _ = reader.load_embeddings(entity, part, 5)
        for offset, name in enumerate(listed):
            if name in {n for names_ in OLD.values() for n in names_}:
                assert rows[offset].tolist() == row_of(name), (entity, part, name)
            elif entity == "user":
                assert rows[offset].tolist() == [-7.0] * 3  # new: the fresh start
    assert {key: value.tolist() for key, value in reader.fresh_rows().items()} == {("user", 0): [1], ("user", 1): []}
    assert recorded_digests(start.url, 5, [("user", 0)], dynamic=False).entities == {
        ("user", 0): current.entities[("user", 0)]
    }


def test_a_retry_with_the_same_names_reuses_the_prepared_start(root: StorePath) -> None:
    init, entities, start, _, names, shape = prepared(root)
    prepare_start(init, entities, start, shape, names)
    before = {name: get_bytes(join(start.url, name)) for name in all_files(start.url)}
    again = prepare_start(init, entities, start, shape, names)
    assert again.reused and again.remapped == ("user",)
    assert {name: get_bytes(join(start.url, name)) for name in all_files(start.url)} == before


def test_a_start_for_other_names_is_not_read(root: StorePath) -> None:
    init, _, start, current, _, _ = prepared(root)
    with pytest.raises(NamesChangedError, match="init_by_name"):
        init_rows(init, start, current, KEYS, dynamic=False)  # nothing prepared
    same = current_digests(entity_files(root / "same", OLD), KEYS, dynamic=False)
    assert init_rows(init, start, same, KEYS, dynamic=False) is init  # the same names: init_path itself


def test_init_path_without_its_names_cannot_be_matched(root: StorePath) -> None:
    init, entities, start, _, names, shape = prepared(root)
    NamesArchive(init.url).remove_except(set())
    with pytest.raises(
        NamesChangedError, match=r"entity type .item. partition 0 follow the names in .*names/.*missing"
    ):
        prepare_start(init, entities, start, shape, names)


def test_dynamic_relation_types_move_by_name(root: StorePath) -> None:
    init, entities, start, _, names, shape = prepared(root, (["likes", "buys", "tags"], ["buys", "blocks", "likes"]))
    done = prepare_start(init, entities, start, shape, names)
    assert done.relations_remapped and done.relations is not None
    assert (done.relations.kept, done.relations.new, done.relations.dropped) == (2, 1, 1)
    model, _ = InitByName(init, start, start.record() or {}).load_model(5)
    assert model["lhs_operators.0.translations"].tolist() == [row_of("buys"), [0.25] * 3, row_of("likes")]


def test_what_moved_counts_each_changed_type(root: StorePath) -> None:
    init, entities, _, _, (recorded, _, check), _ = prepared(root)
    phrases = what_moved(NamesArchive(init.url), recorded, entities, check, PARTS)
    assert phrases == [
        "entity type 'item': 0 of 3 names moved, 1 new, 0 gone",
        "entity type 'user': 4 of 5 names moved, 1 new, 1 gone",
    ]
