"""storage.checkpoint_reader: which version is read, its labels, model state, partitions and selected rows.

Every test runs on a local directory and on S3 (the ``root`` fixture). The exports built on the
reader are tested in tests/storage/exporting/.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from disk_state import changes, tree_state
from store_io import StorePath

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.errors import ShapeError
from pbg_core.ports import CheckpointMetadata
from storage.checkpoint_reader import CheckpointReader
from storage.checkpoints import CheckpointStore
from storage.entities import EntityStore
from storage.errors import BadDataError, DataNotFound
from storage.version_check import IncompleteVersionError

META = CheckpointMetadata(config_json="{}")
PURPOSE = "to read"
USER_ROWS = 7


def make_config(root: StorePath, **extra: Any) -> ConfigSchema:
    raw = {
        "entities": {"user": {"num_partitions": 2}, "item": {"num_partitions": 1}},
        "relations": [{"name": "buys", "lhs": "user", "rhs": "item", "operator": "translation"}],
        "dimension": 3,
        "entity_path": str(root / "entities"),
        "edge_paths": [],
        "checkpoint_path": str(root / "ckpt"),
        **extra,
    }
    return parse_config(raw)


def rows(version: int, part: int, count: int) -> torch.Tensor:
    """Distinct, recognisable rows: version, partition and offset in each value."""
    offsets = torch.arange(count, dtype=torch.float32).unsqueeze(1)
    return version * 100 + part * 10 + offsets + torch.tensor([0.0, 0.25, 0.5])


def write_version(config: ConfigSchema, version: int, commit: bool = True) -> None:
    entities = EntityStore(config.entity_path)
    entities.save_names("user", 0, [f"u{i}" for i in range(USER_ROWS)])
    entities.save_names("user", 1, ["carol"])
    entities.save_names("item", 0, ["book", "pen"])
    entities.save_dynamic_relation_names(["buys"])
    store = CheckpointStore(config.checkpoint_path)
    for entity, part, count in (("user", 0, USER_ROWS), ("user", 1, 1), ("item", 0, 2)):
        store.save_embeddings(entity, part, version, rows(version, part, count), None, META)
    params = {"rhs_operators.0.translation": torch.tensor([0.5, -1.0, 2.0]), "global_embs.emb_user": torch.ones(3)}
    public = {
        "rhs_operators.0.translation": "relations/0/operator/rhs/translation",
        "global_embs.emb_user": "entities/user/global_embedding",
    }
    store.save_model(version, params, public, None, META)
    if commit:
        store.write_version(version)


def test_the_latest_version_its_labels_model_and_partitions(root: StorePath) -> None:
    config = make_config(root, global_emb=True)
    write_version(config, 1)
    write_version(config, 2)
    reader = CheckpointReader(config, None, ["user", "item"], PURPOSE)
    assert reader.version == 2 and reader.shape("user") == (USER_ROWS + 1, 3)
    assert sorted(reader.labels.entities) == [("item", 0), ("user", 0), ("user", 1)]
    assert torch.equal(reader.state_dict["rhs_operators.0.translation"], torch.tensor([0.5, -1.0, 2.0]))
    assert reader.relation_names() == ["buys"]  # standard mode: the entity files' list
    parts = list(reader.partitions("user"))
    assert [names for names, _ in parts] == [[f"u{i}" for i in range(USER_ROWS)], ["carol"]]
    assert np.array_equal(parts[1][1], (rows(2, 1, 1) + 1).numpy())  # global_emb added, as an export does
    assert torch.equal(reader.load_partition("user", 1), rows(2, 1, 1))  # as trained: no global_emb
    global_user = reader.global_embedding("user")
    assert global_user is not None and torch.equal(global_user, torch.ones(3))
    assert reader.global_embedding("item") is None  # the model holds none for it


def test_an_older_version_whose_files_are_there_is_read(root: StorePath) -> None:
    config = make_config(root)
    write_version(config, 1)
    write_version(config, 2)
    reader = CheckpointReader(config, 1, ["item"], PURPOSE)
    assert reader.version == 1
    assert np.array_equal(next(reader.partitions("item"))[1], rows(1, 0, 2).numpy())


def test_a_version_not_there_names_the_versions_present(root: StorePath) -> None:
    config = make_config(root)
    write_version(config, 2)
    write_version(config, 3, commit=False)  # being written: not readable yet
    before = tree_state(str(root))
    for missing in (1, 3, 7):
        with pytest.raises(DataNotFound) as caught:
            CheckpointReader(config, missing, ["user"], PURPOSE)
        assert str(caught.value) == (
            f"{config.checkpoint_path}: no checkpoint version {missing} to read; versions present: 2 "
            "(latest committed: 2)"
        )
    assert changes(before, tree_state(str(root))) == []


def test_nothing_committed_and_a_pointer_ahead_of_its_files(root: StorePath) -> None:
    config = make_config(root)
    with pytest.raises(DataNotFound, match=r"no committed checkpoint to read \(checkpoint_version.txt missing or 0\)"):
        CheckpointReader(config, None, ["user"], PURPOSE)
    write_version(config, 1)
    CheckpointStore(config.checkpoint_path).write_version(2)
    with pytest.raises(IncompleteVersionError, match="checkpoint_version.txt says 2 but version 2's files are missing"):
        CheckpointReader(config, None, ["user"], PURPOSE)
    assert CheckpointReader(config, 1, ["user"], PURPOSE).version == 1  # asked for: no completeness check


def test_selected_rows_in_any_order_with_repeats(root: StorePath) -> None:
    config = make_config(root)
    write_version(config, 1)
    reader = CheckpointReader(config, None, ["user"], PURPOSE)
    whole = reader.load_partition("user", 0).numpy()
    rng = np.random.default_rng(0)
    offsets = rng.integers(0, USER_ROWS, size=20)  # unsorted, with repeats
    got = reader.load_rows("user", 0, offsets)
    assert got.dtype == np.float32 and np.array_equal(got, whole[offsets])
    assert np.array_equal(reader.load_rows("user", 0, np.array([6, 0])), whole[[6, 0]])
    empty = reader.load_rows("user", 0, np.array([], dtype=np.int64))
    assert empty.shape == (0, 3) and empty.dtype == np.float32


@pytest.mark.parametrize("bad", [[0, 7, 9], [-1, 2]])
def test_an_offset_outside_the_partition_is_named(root: StorePath, bad: list[int]) -> None:
    config = make_config(root)
    write_version(config, 1)
    reader = CheckpointReader(config, None, ["user"], PURPOSE)
    first = min(bad) if min(bad) < 0 else 7
    with pytest.raises(BadDataError) as caught:
        reader.load_rows("user", 0, np.array(bad))
    assert str(caught.value).endswith(
        f"embeddings_user_0.v1.h5: offset {first} of entity type 'user' partition 0 is outside its "
        f"{USER_ROWS} rows (0..{USER_ROWS - 1}); {sum(1 for b in bad if not 0 <= b < USER_ROWS)} offset(s) outside in all"
    )
    with pytest.raises(ValueError, match="1-D array of integers"):
        reader.load_rows("user", 0, np.array([0.5]))


def test_a_partition_is_read_into_a_reused_buffer(root: StorePath) -> None:
    config = make_config(root)
    write_version(config, 1)
    reader = CheckpointReader(config, None, ["user", "item"], PURPOSE)
    buffer = torch.empty(2, 3)
    assert reader.load_partition("item", 0, out=buffer) is buffer and torch.equal(buffer, rows(1, 0, 2))
    with pytest.raises(ShapeError, match=r"stored embeddings have shape \(7, 3\), buffer has \(2, 3\)"):
        reader.load_partition("user", 0, out=buffer)


def test_rows_and_names_that_disagree_are_refused(root: StorePath) -> None:
    config = make_config(root)
    write_version(config, 1)
    EntityStore(config.entity_path).save_names("user", 1, ["carol", "dave"])
    reader = CheckpointReader(config, None, ["user"], PURPOSE)
    with pytest.raises(BadDataError, match=r"'user' partition 1 \(v1\) have shape \(1, 3\), expected \(2, D\)"):
        list(reader.partitions("user"))
