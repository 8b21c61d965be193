"""export_embeddings: per-entity TSV / NPY + names JSON / HDF5 files, locally and on S3.

The checkpoint is test_exporter's hand-written one: user (2 partitions: alice, bob | carol),
item (1 partition: book), dimension 2, global embeddings user [10, 20] and item [-1, -1].
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from store_io import StorePath, read_h5_datasets
from test_exporter import META, make_config, write_standard_checkpoint

from pbg_core.config import parse_config
from pbg_core.errors import UnknownNameError
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.errors import BadDataError
from storage.exporting.exporter import export_embeddings

# Stored vectors + global embedding, float32.
USER = np.array([[11.0, 19.5], [10.25, 22.0], [np.float32(0.1) + np.float32(10.0), 20.0]], dtype=np.float32)
ITEM = np.array([[2.0, 3.0]], dtype=np.float32)
RELATIONS_TSV = (
    "buys\trhs\ttranslation\ttranslation\t2\t0.500000000\t-1.000000000\n"
    "scales\trhs\tlinear\tlinear_transformation\t2x2\t1.000000000\t2.000000000\t3.000000000\t4.000000000\n"
)


def test_npy_files_hold_all_partitions_in_row_order(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config)
    out = root / "export"
    report = export_embeddings(config, str(out), "npy")

    user = np.load(io.BytesIO((out / "user.npy").read_bytes()))
    assert user.dtype == np.float32 and user.shape == (3, 2)
    np.testing.assert_array_equal(user, USER)
    np.testing.assert_array_equal(np.load(io.BytesIO((out / "item.npy").read_bytes())), ITEM)
    assert json.loads((out / "user.names.json").read_text()) == ["alice", "bob", "carol"]
    assert json.loads((out / "item.names.json").read_text()) == ["book"]
    assert (out / "relation_types.tsv").read_text() == RELATIONS_TSV
    assert report.entity_counts == {"user": 3, "item": 1} and report.relation_rows_written == 2
    assert sorted(p.name for p in out.iterdir()) == [
        "item.names.json",
        "item.npy",
        "relation_types.tsv",
        "user.names.json",
        "user.npy",
    ]


def test_h5_datasets(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config)
    out = root / "export"
    export_embeddings(config, str(out), "h5", entity_types=["user"])
    datasets = read_h5_datasets(str(out / "user.h5"))
    np.testing.assert_array_equal(datasets["embeddings"], USER)
    assert [n.decode() if isinstance(n, bytes) else n for n in datasets["names"]] == ["alice", "bob", "carol"]
    assert sorted(p.name for p in out.iterdir()) == ["relation_types.tsv", "user.h5"]


def test_tsv_per_entity_type_is_pbgs_layout(root: StorePath) -> None:
    config = make_config(root, global_emb=False)
    write_standard_checkpoint(config, version=2)
    out = root / "export"
    report = export_embeddings(config, str(out), "tsv", entity_types=["item", "user"], version=2)
    assert (out / "user.tsv").read_text() == (
        "alice\t1.000000000\t-0.500000000\nbob\t0.250000000\t2.000000000\ncarol\t0.100000001\t0.000000000\n"
    )
    assert (out / "item.tsv").read_text() == "book\t3.000000000\t4.000000000\n"
    assert report.version == 2 and report.entities_written == 4
    assert report.outputs == (str(out / "item.tsv"), str(out / "user.tsv"), str(out / "relation_types.tsv"))


def test_unicode_names_in_every_format(tmp_path: Path) -> None:
    config = make_config(StorePath(str(tmp_path)), global_emb=False)
    write_standard_checkpoint(config)
    EntityStore(config.entity_path).save_names("user", 1, ['caf\u00e9 "\u6771"'])
    for fmt in ("tsv", "npy", "h5"):
        export_embeddings(config, str(tmp_path / fmt), fmt, entity_types=["user"])
    tsv_lines = (tmp_path / "tsv" / "user.tsv").read_text(encoding="utf-8").splitlines()
    assert tsv_lines[2].startswith('caf\u00e9 "\u6771"\t')
    assert json.loads((tmp_path / "npy" / "user.names.json").read_text(encoding="utf-8"))[2] == 'caf\u00e9 "\u6771"'
    names = read_h5_datasets(str(tmp_path / "h5" / "user.h5"))["names"]
    assert names[2].decode("utf-8") == 'caf\u00e9 "\u6771"'


def test_refuses_existing_outputs_naming_all_and_writes_nothing(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config)
    out = root / "export"
    (out / "user.names.json").write_text("keep")
    (out / "relation_types.tsv").write_text("keep too")
    with pytest.raises(FileExistsError, match=r"user\.names\.json.*relation_types\.tsv"):
        export_embeddings(config, str(out), "npy")
    assert sorted(p.name for p in out.iterdir()) == ["relation_types.tsv", "user.names.json"]
    assert (out / "user.names.json").read_text() == "keep"


def test_failure_in_a_later_entity_type_publishes_nothing(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config)
    EntityStore(config.entity_path).save_names("item", 0, ["book", "pen"])  # 2 names, 1 stored row
    out = root / "export"
    with pytest.raises(BadDataError, match=r"'item' partition 0 .* shape \(1, 2\), expected \(2, D\)"):
        export_embeddings(config, str(out), "npy")
    assert not out.exists() or out.iterdir() == []


def test_bad_requests(root: StorePath) -> None:
    config = make_config(root)
    write_standard_checkpoint(config)
    with pytest.raises(UnknownNameError, match=r"unknown export format 'parquet'.*known: h5, npy, tsv"):
        export_embeddings(config, str(root / "o"), "parquet")
    with pytest.raises(ValueError, match=r"must be some of \['user', 'item'\], got \['users'\]"):
        export_embeddings(config, str(root / "o"), "npy", entity_types=["users"])
    with pytest.raises(ValueError, match=r"must be some of"):
        export_embeddings(config, str(root / "o"), "npy", entity_types=[])
    assert not (root / "o").exists()


def test_featurized_entity_types_are_refused(tmp_path: Path) -> None:
    root = StorePath(str(tmp_path))
    config = parse_config(
        {
            "entities": {"doc": {"num_partitions": 1, "featurized": True}, "word": {"num_partitions": 1}},
            "relations": [{"name": "has", "lhs": "doc", "rhs": "word"}],
            "dimension": 2,
            "global_emb": False,
            "entity_path": str(root / "entities"),
            "edge_paths": [],
            "checkpoint_path": str(root / "ckpt"),
        }
    )
    EntityStore(config.entity_path).save_names("word", 0, ["w"])
    store = CheckpointStore(config.checkpoint_path)
    store.save_embeddings("word", 0, 1, torch.tensor([[1.0, 2.0]]), None, META)
    store.save_embeddings("doc", 0, 1, torch.tensor([[0.5, 0.5]]), None, META)  # its features' rows
    store.save_model(1, {}, {}, None, META)
    store.write_version(1)
    with pytest.raises(ValueError, match=r"featurized entity type\(s\) \['doc'\].*non-featurized: \['word'\]"):
        export_embeddings(config, str(root / "o"), "h5")
    report = export_embeddings(config, str(root / "o"), "h5", entity_types=["word"])
    assert report.entity_counts == {"word": 1}


def test_a_version_without_files_names_the_versions_present_and_creates_nothing(root: StorePath) -> None:
    """``--version 7`` of a checkpoint without v7 used to leave an empty output folder."""
    from storage.errors import DataNotFound
    from storage.exporting.exporter import export_tsv

    config = make_config(root)
    write_standard_checkpoint(config, version=2)
    out = root / "export"
    with pytest.raises(
        DataNotFound,
        match=r"ckpt: no checkpoint version 7 to export; versions present: 2 "
        r"\(latest committed: 2\)",
    ):
        export_embeddings(config, str(out), "npy", version=7)
    with pytest.raises(DataNotFound, match=r"no checkpoint version 0 to export"):
        export_tsv(config, str(out / "e.tsv"), str(out / "r.tsv"), version=0)
    assert not out.exists()


def test_unknown_entity_types_are_a_pbg_error(root: StorePath) -> None:
    from pbg_core.errors import PbgError

    config = make_config(root)
    write_standard_checkpoint(config)
    with pytest.raises(PbgError, match=r"entity types to export must be some of \['user', 'item'\], got \['users'\]"):
        export_embeddings(config, str(root / "o"), "npy", entity_types=["users"])


def test_an_output_folder_below_a_file_is_one_error_and_leaves_nothing(tmp_path: Path) -> None:
    from storage.errors import BadUrlError

    config = make_config(StorePath(str(tmp_path)))
    write_standard_checkpoint(config)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(BadUrlError, match=r"cannot create directory .*a-file/out: part of that path is a file"):
        export_embeddings(config, str(tmp_path / "a-file" / "out"), "tsv")
    assert (tmp_path / "a-file").read_text() == "x"


def test_an_unwritable_output_folder_is_access_denied(tmp_path: Path) -> None:
    import os

    from storage.errors import AccessDenied

    config = make_config(StorePath(str(tmp_path)))
    write_standard_checkpoint(config)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("this user may write into a read-only directory (root): permissions cannot be tested")
        with pytest.raises(AccessDenied, match=r"locked/out/user.tsv: access denied"):
            export_embeddings(config, str(locked / "out"), "tsv")
        with pytest.raises(AccessDenied, match=r"cannot write into directory .*locked \(permission denied\)"):
            export_embeddings(config, str(locked), "tsv")
    finally:
        locked.chmod(0o755)
