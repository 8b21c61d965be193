"""``init_path`` after a plain re-import: rows follow their entities by name (the ``pbg`` flow, in process).

A changed input imported without ``--append`` reshuffles every entity (and the dynamic
relation types) into new (partition, offset) places. The runs here start from a trained
checkpoint with ``lr = 0``, so the committed version holds exactly the rows they started from,
and compare them by name through ``export``. Two entity types, two partitions (names move
between partitions), seeded. The same through the real command line is in
``test_cli_init_by_name.py``; the cluster and S3 cases run with ``PBG_SLOW_TESTS=1``.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import pytest
import torch
from disk_state import changes, tree_state

from flows.train import pbg
from pbg_core.config import parse_config
from pbg_core.model.embedder import build_model
from pbg_core.session.partition_reads import random_start
from storage.checkpoint_names import DIGEST_ATTR, NamesChangedError, current_digests, recorded_digests
from storage.entities import EntityStore
from storage.exporting.exporter import export_tsv
from storage.importing.importer import import_edges
from storage.importing.options import ImportOptions
from storage.layout import NAMES_DIR
from tasks.by_name import run_keys

Edge = tuple[str, str, str]
FROZEN = {"lr": 0.0, "relation_lr": 0.0, "num_epochs": 1}  # training leaves every row where it started


def graph_edges(seed: int) -> list[Edge]:
    rng = random.Random(seed)
    bought = [(f"u{rng.randrange(80)}", "bought", f"i{rng.randrange(40)}") for _ in range(500)]
    follows = [(f"u{rng.randrange(80)}", "follows", f"u{rng.randrange(80)}") for _ in range(300)]
    return bought + follows


def changed(edges: list[Edge]) -> list[Edge]:
    """Some edges removed (u3 and i5 with them), some added (new u500, u501, i600)."""
    kept = [e for e in edges[40:] if "u3" not in (e[0], e[2]) and e[2] != "i5"]
    return kept + [
        ("u500", "bought", "i7"),
        ("u1", "follows", "u501"),
        ("u500", "follows", "u2"),
        ("u9", "bought", "i600"),
    ]


def config_for(root: Path | str, checkpoint: str, partitions: int = 2, **overrides: Any) -> Any:
    """The run's config; ``root``: a local directory or an ``s3://`` prefix holding its data."""
    base = str(root).rstrip("/")
    raw: dict[str, Any] = {
        "entities": {"user": {"num_partitions": partitions}, "item": {"num_partitions": partitions}},
        "relations": [
            {"name": "bought", "lhs": "user", "rhs": "item"},
            {"name": "follows", "lhs": "user", "rhs": "user"},
        ],
        "dimension": 8,
        "entity_path": f"{base}/data",
        "edge_paths": [f"{base}/edges"],
        "checkpoint_path": f"{base}/{checkpoint}",
        "num_epochs": 2,
        "hogwild_delay": 0,
        "workers": 1,
        "seed": 0,
        "eval_fraction": 0,
        "global_emb": False,  # the export adds a type's global embedding to each row: rows alone here
        **overrides,
    }
    return parse_config(raw)


def imported(root: Path, edges: list[Edge], seed: int, partitions: int = 2, into: str | None = None) -> None:
    """``pbg import`` of ``edges`` (written under ``root``) into ``into`` (default ``root``), no --append."""
    (root / "edges.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in edges))
    config = config_for(into or root, "unused", partitions)
    import_edges(config, [str(root / "edges.tsv")], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=seed)


def exported(config: Any, root: Path, name: str) -> dict[str, list[float]]:
    export_tsv(config, str(root / f"{name}.tsv"), str(root / f"{name}-relations.tsv"))
    rows = [line.split("\t") for line in (root / f"{name}.tsv").read_text().splitlines()]
    return {row[0]: [float(x) for x in row[1:]] for row in rows}


def places(config: Any) -> dict[str, tuple[str, int, int]]:
    """name -> (type, partition, offset) in the entity files now."""
    entities = EntityStore(config.entity_path)
    return {
        name: (entity, part, offset)
        for entity, part in run_keys(config)
        for offset, name in enumerate(entities.load_names(entity, part))
    }


@dataclass(frozen=True)
class Reimported:
    """run0 trained on the graph (its rows and places by name), then the changed graph imported over it."""

    root: Path
    old: dict[str, list[float]]
    old_places: dict[str, tuple[str, int, int]]


@pytest.fixture(scope="module")
def reimported(tmp_path_factory: pytest.TempPathFactory) -> Reimported:
    root = tmp_path_factory.mktemp("reimported")
    imported(root, graph_edges(0), seed=0)
    old_config = config_for(root, "run0", checkpoint_preservation_interval=1)
    pbg(config=old_config)
    old, old_places = exported(old_config, root, "run0"), places(old_config)
    imported(root, changed(graph_edges(0)), seed=1)  # no --append: every entity reshuffled
    moved = [n for n, place in places(old_config).items() if n in old_places and place[1] != old_places[n][1]]
    assert moved, "the re-import must move entities between partitions"
    return Reimported(root, old, old_places)


def trained_then_reimported(
    reimported: Reimported, root: Path
) -> tuple[dict[str, list[float]], dict[str, tuple[str, int, int]]]:
    """A copy of the module's run0 and re-imported entity files under ``root`` (tests change them)."""
    shutil.copytree(reimported.root, root, dirs_exist_ok=True)
    return reimported.old, reimported.old_places


def fresh_row(config: Any, place: tuple[str, int, int]) -> list[float]:
    """What a fresh model starts the row at ``place`` with (seed 0)."""
    entity, part, offset = place
    count = EntityStore(config.entity_path).load_count(entity, part)
    rows = torch.empty(count, 8)
    random_start(rows, 0, entity, part, config.init_scale)
    return rows[offset].tolist()


def test_every_entity_in_both_imports_starts_from_its_own_trained_row(reimported: Reimported, tmp_path: Path) -> None:
    old, _ = trained_then_reimported(reimported, tmp_path)
    config = config_for(tmp_path, "run1", init_path=str(tmp_path / "run0"), **FROZEN)
    pbg(config=config)
    new, now = exported(config, tmp_path, "run1"), places(config)
    both = set(old) & set(new)
    assert len(both) > 100 and {"u3", "i5"} <= set(old) - set(new)
    assert [name for name in sorted(both) if new[name] != old[name]] == []
    for name in sorted(set(new) - set(old)):  # u500, u501, i600: a fresh model's start (random)
        assert new[name] == pytest.approx(fresh_row(config, now[name]), abs=1e-7), name
    # What run1 wrote records the names it trained, and keeps them; the start by name is gone.
    entities = EntityStore(config.entity_path)
    assert recorded_digests(config.checkpoint_path, 1, run_keys(config), dynamic=False) == current_digests(
        entities, run_keys(config), dynamic=False
    )
    assert len(list((tmp_path / "run1" / NAMES_DIR).iterdir())) == 4
    assert not (tmp_path / "run1" / "init_by_name").exists()


def test_epoch_snapshots_carry_the_names_of_their_rows(reimported: Reimported, tmp_path: Path) -> None:
    trained_then_reimported(reimported, tmp_path)
    snapshot = tmp_path / "run0" / "epoch_1"
    keys = [(e, p) for e in ("item", "user") for p in range(2)]
    recorded = recorded_digests(str(snapshot), 1, keys, dynamic=False)
    assert set(recorded.entities) == set(keys)
    assert {f"{d}.json" for d in recorded.entities.values()} == {p.name for p in (snapshot / NAMES_DIR).iterdir()}


@pytest.mark.slow
def test_new_entities_start_at_their_trained_neighbors_mean_after_a_reimport(
    reimported: Reimported, tmp_path: Path
) -> None:
    old, _ = trained_then_reimported(reimported, tmp_path)
    config = config_for(tmp_path, "run1", init_path=str(tmp_path / "run0"), init_new_entities="neighbor_mean", **FROZEN)
    pbg(config=config)
    new = exported(config, tmp_path, "run1")
    assert [name for name in sorted(set(old) & set(new)) if new[name] != old[name]] == []
    # u500's neighbors now: i7 and u2 (both trained); i600's: u9; u501's: u1.
    for name, neighbors in {"u500": ["i7", "u2"], "i600": ["u9"], "u501": ["u1"]}.items():
        expected = torch.tensor([old[n] for n in neighbors]).mean(0)
        torch.testing.assert_close(torch.tensor(new[name]), expected, atol=1e-5, rtol=1e-4)


def test_resuming_a_checkpoint_after_a_reimport_is_refused_and_changes_nothing(
    reimported: Reimported, tmp_path: Path
) -> None:
    trained_then_reimported(reimported, tmp_path)
    before = tree_state(tmp_path)
    with pytest.raises(
        NamesChangedError, match=r"version 2 was trained on other names .*entity type 'user': .* names moved"
    ):
        pbg(config=config_for(tmp_path, "run0", num_epochs=3))
    assert changes(before, tree_state(tmp_path)) == []


def test_a_checkpoint_without_a_names_record_is_used_by_position(reimported: Reimported, tmp_path: Path) -> None:
    _, old_places = trained_then_reimported(reimported, tmp_path)
    # As PBG writes it: no names/ directory, no names/digest attribute.
    for path in (tmp_path / "run0").glob("*.h5"):
        with h5py.File(path, "a") as hf:
            if DIGEST_ATTR in hf.attrs:  # the model file has none without dynamic relations
                del hf.attrs[DIGEST_ATTR]
    for path in (tmp_path / "run0" / NAMES_DIR).iterdir():
        path.unlink()
    old_rows = {}
    for entity, part in [(e, p) for e in ("item", "user") for p in range(2)]:
        with h5py.File(tmp_path / "run0" / f"embeddings_{entity}_{part}.v2.h5", "r") as hf:
            old_rows[(entity, part)] = hf["embeddings"][()].tolist()
    config = config_for(tmp_path, "run1", init_path=str(tmp_path / "run0"), **FROZEN)
    pbg(config=config)
    new, now = exported(config, tmp_path, "run1"), places(config)
    for name, (entity, part, offset) in now.items():
        if offset < len(old_rows[(entity, part)]):
            assert new[name] == pytest.approx(
                old_rows[(entity, part)][offset], abs=1e-8
            )  # by position, as PBG reads it
    assert old_places  # the record-less rows went where PBG would put them, whatever the names


@pytest.mark.slow
@pytest.mark.parametrize("start", ["identity", "normal"])
def test_dynamic_relation_types_keep_their_parameters_by_name(tmp_path: Path, start: str) -> None:
    """Kept relation types keep their trained rows; a new one starts as a fresh run's (operator_init)."""
    dynamic = {"relations": [{"name": "any", "lhs": "user", "rhs": "user", "operator": "translation"}]}
    rng = random.Random(3)
    edges = [(f"u{rng.randrange(50)}", f"r{rng.randrange(6)}", f"u{rng.randrange(50)}") for _ in range(400)]
    raw = {"entities": {"user": {"num_partitions": 1}}, "dynamic_relations": True, **dynamic}
    (tmp_path / "edges.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in edges))
    import_edges(
        config_for(tmp_path, "x", **raw),
        [str(tmp_path / "edges.tsv")],
        ImportOptions(lhs_col=0, rhs_col=2, rel_col=1),
        seed=0,
    )
    run0 = config_for(tmp_path, "run0", **raw)
    pbg(config=run0)
    old_relations = relation_rows(run0, tmp_path, "run0")
    kept = [e for e in edges if e[1] != "r2"] + [("u1", "r9", "u2")]  # r2 gone, r9 new
    (tmp_path / "edges.tsv").write_text("".join(f"{a}\t{r}\t{b}\n" for a, r, b in kept))
    before = EntityStore(run0.entity_path).load_dynamic_relation_names()
    import_edges(run0, [str(tmp_path / "edges.tsv")], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1), seed=5)
    after = EntityStore(run0.entity_path).load_dynamic_relation_names()
    assert [n for n in after if n in before] != [n for n in before if n in after]  # reshuffled, not only filtered
    run1 = config_for(tmp_path, "run1", init_path=str(tmp_path / "run0"), operator_init=start, **raw, **FROZEN)
    pbg(config=run1)
    new_relations = relation_rows(run1, tmp_path, "run1")
    assert set(new_relations) == {f"r{i}" for i in (0, 1, 3, 4, 5, 9)}
    for name in ("r0", "r1", "r3", "r4", "r5"):
        assert new_relations[name] == old_relations[name], name
    fresh = build_model(run1, len(after), seed=0).state_dict()  # the run's seed
    rows = [fresh[f"{side}_operators.0.translations"][after.index("r9")].tolist() for side in ("lhs", "rhs")]
    assert new_relations["r9"] == [[pytest.approx(x, abs=1e-9) for x in row] for row in rows]
    assert (rows == [[0.0] * 8, [0.0] * 8]) == (start == "identity")  # PBG's 0, or N(0, init_scale²)


def relation_rows(config: Any, root: Path, name: str) -> dict[str, list[list[float]]]:
    """relation name -> its lhs and rhs translation rows, from the export."""
    exported(config, root, name)
    rows: dict[str, list[list[float]]] = {}
    for line in (root / f"{name}-relations.tsv").read_text().splitlines():
        fields = line.split("\t")
        rows.setdefault(fields[0], []).append([float(x) for x in fields[5:]])
    return rows


@pytest.mark.slow
def test_a_cluster_run_reads_the_start_by_name_on_every_machine(tmp_path: Path) -> None:
    """num_machines = 2 (a local Dask cluster): the machines read the remapped start and record the names."""
    imported(tmp_path, graph_edges(0), seed=0, partitions=4)
    run0 = config_for(tmp_path, "run0", partitions=4, num_epochs=1)
    pbg(config=run0)
    old = exported(run0, tmp_path, "run0")
    imported(tmp_path, changed(graph_edges(0)), seed=1, partitions=4)
    run1 = config_for(tmp_path, "run1", partitions=4, init_path=str(tmp_path / "run0"), num_machines=2, **FROZEN)
    result = pbg(config=run1)
    assert len({bucket["machine"] for it in result["iterations"] for bucket in it["buckets"]}) == 2
    new = exported(run1, tmp_path, "run1")
    assert [name for name in sorted(set(old) & set(new)) if new[name] != old[name]] == []
    keys = run_keys(run1)
    assert recorded_digests(run1.checkpoint_path, 1, keys, dynamic=False) == current_digests(
        EntityStore(run1.entity_path), keys, dynamic=False
    )


@pytest.mark.slow
def test_on_s3_rows_follow_their_entities_by_name(s3_bucket: str, tmp_path: Path) -> None:
    """Entity files, edges and checkpoints on S3: the names record, the start by name, the refusal."""
    root = f"s3://{s3_bucket}/graph"
    imported(tmp_path, graph_edges(0), seed=0, into=root)
    run0 = config_for(root, "run0", num_epochs=1)
    pbg(config=run0)
    old = exported(run0, tmp_path, "run0")
    imported(tmp_path, changed(graph_edges(0)), seed=1, into=root)
    before = tree_state(f"{root}/run0")
    with pytest.raises(NamesChangedError, match="was trained on other names"):
        pbg(config=config_for(root, "run0", num_epochs=2))
    assert changes(before, tree_state(f"{root}/run0")) == []
    run1 = config_for(root, "run1", init_path=f"{root}/run0", **FROZEN)
    pbg(config=run1)
    new = exported(run1, tmp_path, "run1")
    assert len(set(old) & set(new)) > 100 and set(new) - set(old) == {"u500", "u501", "i600"}
    assert [name for name in sorted(set(old) & set(new)) if new[name] != old[name]] == []
    assert tree_state(f"{root}/run1/init_by_name") == {}  # gone after the first commit
