"""Tests of the TSV exporter against hand-written checkpoints and hand-written expected text."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from disk_state import changes, tree_state
from store_io import StorePath

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.ports import CheckpointMetadata
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.errors import BadDataError, DataNotFound
from storage.exporting.exporter import export_tsv, write_rows
from storage.version_check import IncompleteVersionError

META = CheckpointMetadata(config_json="{}")


def make_config(root: StorePath, **extra: Any) -> ConfigSchema:
    raw = {
        "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 1}},
        "relations": [
            {"name": "buys", "lhs": "user", "rhs": "item", "operator": "translation"},
            {"name": "plain", "lhs": "user", "rhs": "item"},
            {"name": "scales", "lhs": "user", "rhs": "item", "operator": "linear"},
        ],
        "dimension": 2,
        "entity_path": str(root / "entities"),
        "edge_paths": [],
        "checkpoint_path": str(root / "ckpt"),
        **extra,
    }
    return parse_config(raw)


def save_model(store: CheckpointStore, version: int, params: dict[str, torch.Tensor]) -> None:
    public = {}
    for key in params:
        if key.startswith("global_embs.emb_"):
            public[key] = f"entities/{key.removeprefix('global_embs.emb_')}/global_embedding"
        else:
            side_ops, index, param = key.split(".")
            public[key] = f"relations/{index}/operator/{side_ops.removesuffix('_operators')}/{param}"
    store.save_model(version, params, public, None, META)


def write_standard_checkpoint(config: ConfigSchema, version: int = 1, relation_names: list[str] | None = None) -> None:
    entities = EntityStore(config.entity_path)
    entities.save_names("user", 0, ["alice", "bob"])
    entities.save_names("user", 1, ["carol"])
    entities.save_names("item", 0, ["book"])
    entities.save_dynamic_relation_names(relation_names or ["buys", "plain", "scales"])
    store = CheckpointStore(config.checkpoint_path)
    store.save_embeddings("user", 0, version, torch.tensor([[1.0, -0.5], [0.25, 2.0]]), None, META)
    store.save_embeddings("user", 1, version, torch.tensor([[0.1, 0.0]]), None, META)
    store.save_embeddings("item", 0, version, torch.tensor([[3.0, 4.0]]), None, META)
    save_model(
        store,
        version,
        {
            "rhs_operators.0.translation": torch.tensor([0.5, -1.0]),
            "rhs_operators.2.linear_transformation": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
            "global_embs.emb_user": torch.tensor([10.0, 20.0]),
            "global_embs.emb_item": torch.tensor([-1.0, -1.0]),
        },
    )
    store.write_version(version)


def test_write_rows_formats_float32_like_pbg() -> None:
    out = io.StringIO()
    written = write_rows(out, ["a", "b"], torch.tensor([[0.1, -0.0], [1e-10, 123456.789]]))
    # float32 widened to double, then %.9f: 0.1f -> 0.100000001, 123456.789f -> 123456.789062500
    assert out.getvalue() == "a\t0.100000001\t-0.000000000\nb\t0.000000000\t123456.789062500\n"
    assert written == 2


def test_export_standard_mode_exact_text(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config)
    entities_out, relations_out = root / "out" / "entities.tsv", root / "out" / "relations.tsv"
    report = export_tsv(config, str(entities_out), str(relations_out))

    # global_emb is on (default): user vectors + [10, 20], item vectors + [-1, -1].
    assert entities_out.read_text() == (
        "alice\t11.000000000\t19.500000000\n"
        "bob\t10.250000000\t22.000000000\n"
        "carol\t10.100000381\t20.000000000\n"  # float32 sum: 0.1f + 10 = 10.100000381...
        "book\t2.000000000\t3.000000000\n"
    )
    # Only rhs rows; the "none" operator has no parameter, so no row for "plain".
    assert relations_out.read_text() == (
        "buys\trhs\ttranslation\ttranslation\t2\t0.500000000\t-1.000000000\n"
        "scales\trhs\tlinear\tlinear_transformation\t2x2\t1.000000000\t2.000000000\t3.000000000\t4.000000000\n"
    )
    assert (report.version, report.entities_written, report.relation_rows_written) == (1, 4, 2)


def test_export_without_global_emb_and_explicit_version(root: StorePath) -> None:
    config = make_config(root, global_emb=False)
    write_standard_checkpoint(config, version=3)
    out = root / "e.tsv"
    export_tsv(config, str(out), str(root / "r.tsv"), version=3)
    assert out.read_text().splitlines()[0] == "alice\t1.000000000\t-0.500000000"


def test_export_dynamic_mode_writes_lhs_and_rhs_per_relation(root: StorePath) -> None:
    config = parse_config(
        {
            "entities": {"e": {"num_partitions": 1}},
            "relations": [{"name": "all", "lhs": "e", "rhs": "e", "operator": "complex_diagonal"}],
            "dynamic_relations": True,
            "global_emb": False,
            "dimension": 2,
            "entity_path": str(root / "entities"),
            "edge_paths": [],
            "checkpoint_path": str(root / "ckpt"),
        }
    )
    entities = EntityStore(config.entity_path)
    entities.save_names("e", 0, ["x"])
    entities.save_dynamic_relation_names(["r_a", "r_b"])
    store = CheckpointStore(config.checkpoint_path)
    store.save_embeddings("e", 0, 1, torch.tensor([[0.5, 0.75]]), None, META)
    save_model(
        store,
        1,
        {
            "lhs_operators.0.real": torch.tensor([[1.0], [2.0]]),
            "lhs_operators.0.imag": torch.tensor([[3.0], [4.0]]),
            "rhs_operators.0.real": torch.tensor([[5.0], [6.0]]),
            "rhs_operators.0.imag": torch.tensor([[7.0], [8.0]]),
        },
    )
    store.write_version(1)
    relations_out = root / "r.tsv"
    report = export_tsv(config, str(root / "e.tsv"), str(relations_out))
    assert relations_out.read_text() == (
        "r_a\tlhs\tcomplex_diagonal\treal\t1\t1.000000000\n"
        "r_b\tlhs\tcomplex_diagonal\treal\t1\t2.000000000\n"
        "r_a\tlhs\tcomplex_diagonal\timag\t1\t3.000000000\n"
        "r_b\tlhs\tcomplex_diagonal\timag\t1\t4.000000000\n"
        "r_a\trhs\tcomplex_diagonal\treal\t1\t5.000000000\n"
        "r_b\trhs\tcomplex_diagonal\treal\t1\t6.000000000\n"
        "r_a\trhs\tcomplex_diagonal\timag\t1\t7.000000000\n"
        "r_b\trhs\tcomplex_diagonal\timag\t1\t8.000000000\n"
    )
    assert (root / "e.tsv").read_text() == "x\t0.500000000\t0.750000000\n"
    assert report.relation_rows_written == 8


def test_refuses_to_overwrite_and_creates_nothing(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config)
    existing = root / "relations.tsv"
    existing.write_text("keep me")
    with pytest.raises(FileExistsError, match="relations.tsv"):
        export_tsv(config, str(root / "entities.tsv"), str(existing))
    assert existing.read_text() == "keep me"
    assert not (root / "entities.tsv").exists()


def test_failure_midway_removes_outputs(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config, relation_names=["buys", "other", "scales"])
    with pytest.raises(BadDataError, match=r"dynamic_rel_names.json lists relations .*'other'"):
        export_tsv(config, str(root / "e.tsv"), str(root / "r.tsv"))
    assert not (root / "e.tsv").exists() and not (root / "r.tsv").exists()


def test_names_and_embeddings_must_agree(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config)
    EntityStore(config.entity_path).save_names("user", 1, ["carol", "dave"])
    with pytest.raises(BadDataError, match=r"'user' partition 1 .* shape \(1, 2\), expected \(2, D\)"):
        export_tsv(config, str(root / "e.tsv"), str(root / "r.tsv"))


def test_no_committed_checkpoint(root: StorePath) -> None:
    config = make_config(root)
    with pytest.raises(DataNotFound, match="no committed checkpoint"):
        export_tsv(config, str(root / "e.tsv"), str(root / "r.tsv"))
    assert not (root / "e.tsv").exists()


def test_the_latest_version_behind_its_pointer_is_named_and_nothing_is_written(root: StorePath) -> None:
    """checkpoint_version.txt ahead of its files (an interrupted copy): one line, not an HDF5 error."""
    config = make_config(root)
    write_standard_checkpoint(config)
    CheckpointStore(config.checkpoint_path).write_version(2)
    before = tree_state(str(root))
    with pytest.raises(IncompleteVersionError) as raised:
        export_tsv(config, str(root / "e.tsv"), str(root / "r.tsv"))
    assert str(raised.value) == (
        f"{config.checkpoint_path}: checkpoint_version.txt says 2 but version 2's files are missing (4 of 4: "
        "embeddings_item_0.v2.h5, embeddings_user_0.v2.h5, embeddings_user_1.v2.h5, model.v2.h5): found complete "
        "version 1; nothing was removed; restore version 2's files, or write 1 into checkpoint_version.txt to go "
        "on from version 1"
    )
    assert changes(before, tree_state(str(root))) == []
    assert export_tsv(config, str(root / "e.tsv"), str(root / "r.tsv"), version=1).version == 1  # what is there
