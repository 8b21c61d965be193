"""Tests for storage.checkpoints: PBG checkpoint files, version pointer, remove/preserve."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from store_io import StorePath, move_tree, read_h5, write_h5

from pbg_core.errors import ShapeError
from pbg_core.ports import CompleteVersion, VersionLayout
from storage.checkpoints import CheckpointMetadata, CheckpointStore
from storage.errors import BadDataError, DataNotFound, FormatVersionError
from storage.version_check import IncompleteVersionError

META = CheckpointMetadata(config_json='{"dimension": 4}', iteration={"epoch_idx": 1, "edge_path": "/data/p0"})
LAYOUT = VersionLayout({("user", 0): (5, 4), ("user", 1): (5, 4)})  # what _write_version writes


def _optim_bytes(seed: int) -> bytes:
    buf = io.BytesIO()
    torch.save({"state": torch.arange(seed, seed + 3, dtype=torch.float32)}, buf)
    return buf.getvalue()


def _embs(seed: int, count: int = 5, dim: int = 4) -> torch.Tensor:
    return torch.randn(count, dim, generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def store(root: StorePath) -> CheckpointStore:
    return CheckpointStore(str(root))


def test_version_pointer_semantics(root: StorePath, store: CheckpointStore) -> None:
    assert store.read_version() == 0  # missing file
    (root / "checkpoint_version.txt").write_text("")
    assert store.read_version() == 0  # empty file
    store.write_version(3)
    assert (root / "checkpoint_version.txt").read_text() == "3\n"
    assert store.read_version() == 3
    (root / "checkpoint_version.txt").write_text("7")  # PBG tolerates no newline
    assert store.read_version() == 7
    (root / "checkpoint_version.txt").write_text("v7\n")
    with pytest.raises(
        BadDataError, match=r"checkpoint_version.txt: expected one non-negative integer, got 'v7\\n'"
    ) as info:
        store.read_version()
    assert str(info.value).count("checkpoint_version.txt") == 1  # the file's URL names it; the problem does not again
    with pytest.raises(ValueError, match="non-negative int"):
        store.write_version(-1)


def test_embeddings_round_trip_in_pbg_format(root: StorePath, store: CheckpointStore) -> None:
    embs, optim = _embs(0), _optim_bytes(0)
    assert not store.has_embeddings("user", 1, 2)
    store.save_embeddings("user", 1, 2, embs, optim, META)
    assert store.has_embeddings("user", 1, 2)
    loaded, loaded_optim = store.load_embeddings("user", 1, 2)
    assert torch.equal(loaded, embs)
    assert loaded_optim == optim
    assert torch.equal(torch.load(io.BytesIO(loaded_optim))["state"], torch.tensor([0.0, 1.0, 2.0]))
    with read_h5(str(root / "embeddings_user_1.v2.h5")) as hf:
        assert hf.attrs["format_version"] == 1
        assert hf.attrs["config/json"] == '{"dimension": 4}'
        assert hf.attrs["iteration/epoch_idx"] == 1
        assert hf.attrs["iteration/edge_path"] == "/data/p0"
        assert hf["embeddings"].dtype == np.float32
        assert hf["optimizer/state_dict"].dtype == np.dtype("V1")


def test_load_embeddings_into_preallocated_buffer(store: CheckpointStore) -> None:
    store.save_embeddings("e", 0, 1, _embs(1), None, META)
    pool = torch.zeros(8, 4)  # e.g. a shared-memory slot larger than this partition
    out, optim = store.load_embeddings("e", 0, 1, out=pool[:5])
    assert optim is None
    assert out.data_ptr() == pool.data_ptr()
    assert torch.equal(pool[:5], _embs(1))
    assert torch.equal(pool[5:], torch.zeros(3, 4))


def test_load_embeddings_shape_mismatch(store: CheckpointStore) -> None:
    store.save_embeddings("e", 0, 1, _embs(1), None, META)
    with pytest.raises(
        ShapeError, match=r"embeddings_e_0.v1.h5: stored embeddings have shape \(5, 4\), buffer has \(6, 4\)"
    ):
        store.load_embeddings("e", 0, 1, out=torch.zeros(6, 4))
    with pytest.raises(ValueError, match="float32"):
        store.load_embeddings("e", 0, 1, out=torch.zeros(5, 4, dtype=torch.float64))


def test_save_embeddings_rejects_non_2d(store: CheckpointStore) -> None:
    with pytest.raises(ShapeError, match="2-D"):
        store.save_embeddings("e", 0, 1, torch.zeros(3), None, META)


def test_missing_and_wrong_version_files(root: StorePath, store: CheckpointStore) -> None:
    with pytest.raises(DataNotFound, match="embeddings_e_0.v1.h5"):
        store.load_embeddings("e", 0, 1)
    with write_h5(str(root / "model.v1.h5")) as hf:
        hf.attrs["format_version"] = 0
    with pytest.raises(FormatVersionError, match="model.v1.h5"):
        store.load_model(1)


def test_model_round_trip_with_public_names(root: StorePath, store: CheckpointStore) -> None:
    state = {
        "rhs_operators.0.diagonal": torch.tensor([1.0, 2.0]),
        "rhs_operators.1.linear_transformation": torch.eye(2),
        "global_embs.emb_user": torch.tensor([0.5, -0.5]),
    }
    public = {
        "rhs_operators.0.diagonal": "relations/0/operator/rhs/diagonal",
        "rhs_operators.1.linear_transformation": "relations/1/operator/rhs/linear_transformation",
        "global_embs.emb_user": "entities/user/global_embedding",
    }
    store.save_model(4, state, public, _optim_bytes(5), META)
    assert store.has_model(4) and not store.has_model(3)
    loaded, optim = store.load_model(4)
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert optim == _optim_bytes(5)
    with read_h5(str(root / "model.v4.h5")) as hf:
        ds = hf["model/relations/0/operator/rhs/diagonal"]
        assert ds.attrs["state_dict_key"] == "rhs_operators.0.diagonal"
        assert list(hf["model"].keys()) == ["relations", "entities"]  # track_order keeps insertion order
    assert store.load_metadata(4) == META


def test_save_model_requires_public_name_for_every_key(store: CheckpointStore) -> None:
    with pytest.raises(ValueError, match="no public name for state_dict keys"):
        store.save_model(1, {"x": torch.zeros(1)}, {}, None, META)
    assert not store.has_model(1)


def test_model_dataset_without_state_dict_key(root: StorePath, store: CheckpointStore) -> None:
    with write_h5(str(root / "model.v1.h5")) as hf:
        hf.attrs["format_version"] = 1
        hf.create_dataset("model/relations/0/operator/rhs/diagonal", data=np.ones(2))
    with pytest.raises(BadDataError, match="has no 'state_dict_key'"):
        store.load_model(1)


def test_config_round_trip(root: StorePath, store: CheckpointStore) -> None:
    config = {"dimension": 4, "entities": {"user": {"num_partitions": 1}}}
    store.save_config(config)
    assert store.load_config() == config
    assert (root / "config.json").read_text() == json.dumps(config, indent=4)
    (root / "config.json").write_text("[1]")
    with pytest.raises(BadDataError, match="expected a JSON object"):
        store.load_config()


def _write_version(store: CheckpointStore, v: int) -> None:
    for part in (0, 1):
        store.save_embeddings("user", part, v, _embs(v + part), _optim_bytes(v), META)
    store.save_model(
        v,
        {"rhs_operators.0.diagonal": torch.full((2,), float(v))},
        {"rhs_operators.0.diagonal": "relations/0/operator/rhs/diagonal"},
        None,
        META,
    )


def test_list_and_remove_versions(root: StorePath, store: CheckpointStore) -> None:
    for v in (0, 1, 2, 3):
        _write_version(store, v)
    (root / "model.v9.tmp.h5").write_bytes(b"")  # in-progress files are not versions
    assert store.list_versions() == [0, 1, 2, 3]
    assert store.remove_versions_before(store.check_complete(2, LAYOUT)) == [1]
    assert store.list_versions() == [0, 2, 3]  # v0 is never deleted, newer versions stay
    assert store.remove_versions_before(store.check_complete(2, LAYOUT)) == []  # idempotent
    assert not store.has_embeddings("user", 0, 1) and store.has_embeddings("user", 0, 2)


def test_a_similarity_index_is_removed_with_its_version(root: StorePath, store: CheckpointStore) -> None:
    """Each old version's index goes with it, an orphan (its version went first) too; v0's and newer stay."""
    for v in (0, 2, 3):
        _write_version(store, v)
    for name in ("similar_user.v0.h5", "similar_user.v1.h5", "similar_user.v2.h5", "similar_a.v2.b.v2.h5"):
        (root / name).write_bytes(b"index")  # v1's: an orphan, written after v1 was removed
    (root / "similar_user.v3.h5").write_bytes(b"index")
    (root / "similar_user.v2.tmp.h5").write_bytes(b"")  # an index being written is no index file
    assert store.remove_versions_before(store.check_complete(3, LAYOUT)) == [2]  # the versions, as before
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("similar_")) == [
        "similar_user.v0.h5",
        "similar_user.v2.tmp.h5",
        "similar_user.v3.h5",
    ]
    assert store.list_versions() == [0, 3]


def test_similarity_index_files_are_no_part_of_a_version(root: StorePath, store: CheckpointStore) -> None:
    """Listings, completeness checks and snapshots see the checkpoint files only."""
    _write_version(store, 2)
    store.write_version(2)
    for name in ("similar_user.v2.h5", "similar_user.v3.h5", "similar_user.v9.h5"):
        (root / name).write_bytes(b"index")
    assert store.list_versions() == [2]
    store.check_not_behind(2, LAYOUT)  # v9's index is no sign of a pointer gone back
    with pytest.raises(IncompleteVersionError, match="version 3's files are missing"):
        store.check_complete(3, LAYOUT)  # an index alone is no version
    store.preserve_version(store.check_complete(2, LAYOUT), epoch=1)
    assert sorted(p.name for p in (root / "epoch_1").iterdir()) == [
        "checkpoint_version.txt",
        "embeddings_user_0.v2.h5",
        "embeddings_user_1.v2.h5",
        "model.v2.h5",
    ]


def test_removing_needs_evidence_of_this_directory(root: StorePath, store: CheckpointStore) -> None:
    _write_version(store, 1)
    _write_version(store, 2)
    with pytest.raises(ValueError, match="the complete version given is of another directory"):
        store.remove_versions_before(CompleteVersion(str(root / "elsewhere"), 2))
    assert store.list_versions() == [1, 2]


def test_preserve_makes_real_copies_with_version_file(root: StorePath, store: CheckpointStore) -> None:
    _write_version(store, 5)
    store.write_version(5)
    store.preserve_version(store.check_complete(5, LAYOUT), epoch=3)
    store.preserve_version(store.check_complete(5, LAYOUT), epoch=3)  # idempotent
    snap_dir = root / "epoch_3"
    assert sorted(p.name for p in snap_dir.iterdir()) == [
        "checkpoint_version.txt",
        "embeddings_user_0.v5.h5",
        "embeddings_user_1.v5.h5",
        "model.v5.h5",
    ]
    assert not any(p.is_symlink() for p in snap_dir.iterdir())
    assert store.list_snapshots() == [3]
    # The snapshot survives removal of the originals and is a valid checkpoint directory.
    _write_version(store, 6)
    store.remove_versions_before(store.check_complete(6, LAYOUT))
    snap = CheckpointStore(str(snap_dir))
    assert snap.read_version() == 5
    embs, optim = snap.load_embeddings("user", 1, 5)
    assert torch.equal(embs, _embs(6)) and optim == _optim_bytes(5)
    assert torch.equal(snap.load_model(5)[0]["rhs_operators.0.diagonal"], torch.full((2,), 5.0))
    assert not (root / "model.v5.h5").exists()


def test_no_evidence_for_a_missing_version(store: CheckpointStore) -> None:
    with pytest.raises(IncompleteVersionError, match="version 4's files are missing"):
        store.preserve_version(store.check_complete(4, LAYOUT), epoch=1)


def test_crash_while_writing_leaves_previous_file(root: StorePath, store: CheckpointStore) -> None:
    names = {"a": "relations/0/operator/rhs/diagonal", "b": "relations/1/operator/rhs/diagonal"}
    store.save_model(2, {"a": torch.ones(2), "b": torch.ones(2)}, names, None, META)
    # The second tensor cannot be copied out (meta device): the write fails after the first dataset.
    broken = {"a": torch.zeros(2), "b": torch.empty(2, device="meta")}
    with pytest.raises(NotImplementedError):
        store.save_model(2, broken, names, None, META)
    assert torch.equal(store.load_model(2)[0]["a"], torch.ones(2))
    assert sorted(p.name for p in root.iterdir()) == ["model.v2.h5"]


def test_snapshot_stays_valid_after_moving_the_directory(root: StorePath, store: CheckpointStore) -> None:
    _write_version(store, 2)
    store.write_version(2)
    store.preserve_version(store.check_complete(2, LAYOUT), epoch=1)
    moved = root / "elsewhere" / "snap"
    move_tree(str(root / "epoch_1"), str(moved))
    assert not (root / "epoch_1").exists()
    snap = CheckpointStore(str(moved))
    assert snap.read_version() == 2 and snap.list_versions() == [2]
    assert torch.equal(snap.load_embeddings("user", 0, 2)[0], _embs(2))
    assert torch.equal(snap.load_model(2)[0]["rhs_operators.0.diagonal"], torch.full((2,), 2.0))


def test_version_protocol_on_every_store(store: CheckpointStore) -> None:
    """v+1 is written beside v, the pointer switch commits it, then v is removed."""
    _write_version(store, 1)
    store.write_version(1)
    _write_version(store, 2)
    assert store.read_version() == 1 and store.list_versions() == [1, 2]
    store.write_version(2)
    store.remove_versions_before(store.check_complete(2, LAYOUT))
    assert store.read_version() == 2 and store.list_versions() == [2]
    assert torch.equal(store.load_embeddings("user", 1, 2)[0], _embs(3))
