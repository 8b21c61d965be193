"""pbg export after a plain re-import: every row keeps the name its checkpoint recorded, in every format.

The graph is imported with the real importer (two entity types, two partitions), a version is
committed whose row of each entity is that entity's own vector with the names record a run
writes, then a changed input is imported again without ``--append`` (every name reshuffled).
On local disk and on S3.
"""

from __future__ import annotations

import io
import json
import logging
import random
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
import torch
from disk_state import changes, tree_state
from store_io import StorePath, all_files, get_bytes, join, put_bytes

from pbg_core.config import parse_config
from pbg_core.ports import CheckpointMetadata, NamesDigests
from storage.checkpoint_names import NamesArchive, NamesChangedError, current_digests, names_url
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.exporting.exporter import export_embeddings, export_tsv
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions

KEYS = [("user", 0), ("user", 1), ("item", 0), ("item", 1)]
FORMATS = ["pbg", "tsv", "npy", "h5"]
TRANSLATION = "rhs_operators.0.translation"


def config_for(root: StorePath, checkpoint: str = "ckpt", **overrides: Any) -> Any:
    return parse_config(
        {
            "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 2}},
            "relations": [
                {"name": "bought", "lhs": "user", "rhs": "item", "operator": "translation"},
                {"name": "follows", "lhs": "user", "rhs": "user"},
            ],
            "dimension": 3,
            "entity_path": str(root / "data"),
            "edge_paths": [str(root / "edges")],
            "checkpoint_path": str(root / checkpoint),
            "global_emb": False,
            **overrides,
        }
    )


def edges(changed: bool) -> list[tuple[str, str, str]]:
    rng = random.Random(0)
    found = [(f"u{rng.randrange(30)}", "bought", f"i{rng.randrange(12)}") for _ in range(120)]
    found += [(f"u{rng.randrange(30)}", "follows", f"u{rng.randrange(30)}") for _ in range(80)]
    if changed:  # some edges gone, new names in
        found = found[20:] + [("u100", "bought", "i100"), ("u1", "follows", "u101")]
    return found


def imported(config: Any, tmp_path: Path, changed: bool, seed: int) -> None:
    """``pbg import`` without ``--append``."""
    (tmp_path / "edges.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in edges(changed)))
    import_edges(config, [str(tmp_path / "edges.tsv")], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=seed)


def committed(config: Any, record: bool = True) -> None:
    """Version 1 whose row of each entity is its own vector; ``record=False``: as PBG writes it."""
    entities = EntityStore(config.entity_path)
    digests = current_digests(entities, KEYS, dynamic=False) if record else NamesDigests()
    store = CheckpointStore(config.checkpoint_path)
    if record:
        NamesArchive(store.url).keep({d: names_url(entities, *key) for key, d in digests.entities.items()})
    metadata = CheckpointMetadata("{}", names=digests)
    for entity, part in KEYS:
        vectors = torch.tensor([own_row(name) for name in entities.load_names(entity, part)])
        store.save_embeddings(entity, part, 1, vectors, None, metadata)
    model = {"rhs_operators.0.translation": torch.tensor([0.5, -1.0, 2.0])}
    store.save_model(1, model, {TRANSLATION: "relations/0/operator/rhs/translation"}, None, metadata)
    store.write_version(1)


def own_row(name: str) -> list[float]:
    number = float(name[1:])
    return [number, -number / 4, 1.0 if name[0] == "u" else 2.0]


def exported(config: Any, out: Path, kind: str, version: int | None = None) -> dict[str, list[float]]:
    """name -> exported vector, through ``kind`` (``pbg``: PBG's two files; else ``--format kind``)."""
    if kind == "pbg":
        export_tsv(config, str(out / "entities.tsv"), str(out / "relations.tsv"), version)
        return _tsv_rows(out / "entities.tsv")
    export_embeddings(config, str(out), kind, version=version)  # type: ignore[arg-type]  # one of the export formats
    rows: dict[str, list[float]] = {}
    for entity in ("user", "item"):
        if kind == "tsv":
            rows |= _tsv_rows(out / f"{entity}.tsv")
        elif kind == "npy":
            names = json.loads((out / f"{entity}.names.json").read_text())
            rows |= dict(zip(names, np.load(out / f"{entity}.npy").tolist(), strict=True))
        else:
            with h5py.File(out / f"{entity}.h5", "r") as hf:
                names = [n.decode() for n in hf["names"][()]]
                rows |= dict(zip(names, hf["embeddings"][()].tolist(), strict=True))
    return rows


def _tsv_rows(path: Path) -> dict[str, list[float]]:
    return {line.split("\t")[0]: [float(x) for x in line.split("\t")[1:]] for line in path.read_text().splitlines()}


def test_every_row_keeps_its_name_after_a_reimport_in_every_format(root: StorePath, tmp_path: Path) -> None:
    config = config_for(root)
    imported(config, tmp_path, changed=False, seed=0)
    committed(config)
    before = {kind: exported(config, tmp_path / f"before-{kind}", kind) for kind in FORMATS}
    assert before["pbg"] == {name: own_row(name) for name in before["pbg"]} and len(before["pbg"]) > 30
    places = [EntityStore(config.entity_path).load_names(*key) for key in KEYS]
    imported(config, tmp_path, changed=True, seed=1)
    assert [EntityStore(config.entity_path).load_names(*key) for key in KEYS] != places  # reshuffled
    for kind in FORMATS:  # by name: the checkpoint's names, wherever the entity files put them now
        assert exported(config, tmp_path / f"after-{kind}", kind) == before[kind] == before["pbg"], kind
    for name in ("entities.tsv", "relations.tsv"):  # PBG's layout: the same bytes as before the re-import
        assert (tmp_path / "after-pbg" / name).read_bytes() == (tmp_path / "before-pbg" / name).read_bytes()


def test_a_checkpoint_copied_without_its_names_exports_while_the_entity_files_match(
    root: StorePath, tmp_path: Path
) -> None:
    config = config_for(root)
    imported(config, tmp_path, changed=False, seed=0)
    committed(config)
    for relative in all_files(config.checkpoint_path):  # the copy leaves names/ behind
        if not relative.startswith("names/"):
            put_bytes(join(str(root / "copy"), relative), get_bytes(join(config.checkpoint_path, relative)))
    copy = config_for(root, "copy")
    assert exported(copy, tmp_path / "same", "pbg") == exported(config, tmp_path / "original", "pbg")
    imported(config, tmp_path, changed=True, seed=1)
    before = tree_state(str(root)), tree_state(tmp_path)
    with pytest.raises(NamesChangedError, match=r"the rows of entity type 'user' partition 0 belong to .* missing"):
        export_embeddings(copy, str(tmp_path / "refused"), "npy")
    assert changes(before[0], tree_state(str(root))) == [] and changes(before[1], tree_state(tmp_path)) == []


def test_a_checkpoint_without_a_record_exports_by_position_with_one_warning(
    root: StorePath, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_for(root)
    imported(config, tmp_path, changed=False, seed=0)
    committed(config, record=False)
    imported(config, tmp_path, changed=False, seed=1)  # the same names, shuffled into other places
    with caplog.at_level(logging.WARNING):
        rows = exported(config, tmp_path, "pbg")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "no record of the names its rows belong to" in warnings[0]
    assert "entity type 'user', entity type 'item'" in warnings[0] and "labelled by position" in warnings[0]
    with h5py.File(io.BytesIO(get_bytes(join(config.checkpoint_path, "embeddings_user_1.v1.h5"))), "r") as hf:
        stored = hf["embeddings"][()].tolist()
    # PBG's reading: row i is whoever the entity files list at offset i now.
    names = EntityStore(config.entity_path).load_names("user", 1)
    assert [rows[name] for name in names] == stored
    assert any(rows[name] != own_row(name) for name in names)  # the re-import moved them


def test_dynamic_relation_parameters_keep_their_relation_names(root: StorePath, tmp_path: Path) -> None:
    config = config_for(
        root,
        entities={"user": {"num_partitions": 2}},
        relations=[{"name": "x", "lhs": "user", "rhs": "user", "operator": "translation"}],
        dynamic_relations=True,
    )
    rng = random.Random(2)
    rows = [(f"u{rng.randrange(20)}", f"r{rng.randrange(5)}", f"u{rng.randrange(20)}") for _ in range(150)]
    (tmp_path / "edges.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in rows))
    import_edges(config, [str(tmp_path / "edges.tsv")], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=0)
    entities = EntityStore(config.entity_path)
    keys = [("user", 0), ("user", 1)]
    digests = current_digests(entities, keys, dynamic=True)
    assert digests.relations is not None
    sources = {d: names_url(entities, *key) for key, d in digests.entities.items()}
    sources[digests.relations] = join(entities.url, "dynamic_rel_names.json")
    NamesArchive(config.checkpoint_path).keep(sources)
    store, metadata = CheckpointStore(config.checkpoint_path), CheckpointMetadata("{}", names=digests)
    for entity, part in keys:
        store.save_embeddings(entity, part, 1, torch.zeros(entities.load_count(entity, part), 3), None, metadata)
    relations = entities.load_dynamic_relation_names()
    by_name = torch.tensor([[float(name[1:])] * 3 for name in relations])  # each relation type's own row
    store.save_model(1, {TRANSLATION: by_name}, {TRANSLATION: "relations/0/operator/rhs/translation"}, None, metadata)
    store.write_version(1)
    export_tsv(config, str(tmp_path / "e0.tsv"), str(tmp_path / "r0.tsv"))
    (tmp_path / "edges.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in rows[10:] + [("u1", "r9", "u2")]))
    import_edges(config, [str(tmp_path / "edges.tsv")], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=7)
    assert entities.load_dynamic_relation_names() != relations
    export_tsv(config, str(tmp_path / "e1.tsv"), str(tmp_path / "r1.tsv"))
    assert (tmp_path / "r1.tsv").read_bytes() == (tmp_path / "r0.tsv").read_bytes()
    for line in (tmp_path / "r1.tsv").read_text().splitlines():
        name, *_, value = line.split("\t")
        assert float(value) == float(name[1:])


def test_an_older_version_is_labelled_with_its_own_record(root: StorePath, tmp_path: Path) -> None:
    """Version 1 trained on the first import, version 2 on the second: each exports with its own names."""
    config = config_for(root)
    imported(config, tmp_path, changed=False, seed=0)
    committed(config)
    first = exported(config, tmp_path / "v1-then", "pbg")
    imported(config, tmp_path, changed=True, seed=1)
    entities, store = EntityStore(config.entity_path), CheckpointStore(config.checkpoint_path)
    digests = current_digests(entities, KEYS, dynamic=False)
    NamesArchive(store.url).keep({d: names_url(entities, *key) for key, d in digests.entities.items()})
    for entity, part in KEYS:  # version 2: every row twice its entity's own
        vectors = torch.tensor([[2 * x for x in own_row(name)] for name in entities.load_names(entity, part)])
        store.save_embeddings(entity, part, 2, vectors, None, CheckpointMetadata("{}", names=digests))
    model = {"rhs_operators.0.translation": torch.tensor([0.5, -1.0, 2.0])}
    store.save_model(2, model, {TRANSLATION: "relations/0/operator/rhs/translation"}, None, CheckpointMetadata("{}"))
    store.write_version(2)
    assert exported(config, tmp_path / "v1-now", "pbg", version=1) == first
    latest = exported(config, tmp_path / "v2", "pbg")
    assert latest == {name: [2 * x for x in own_row(name)] for name in latest} and "u100" in latest
