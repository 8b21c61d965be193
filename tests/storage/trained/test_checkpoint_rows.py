"""storage.trained.checkpoint_rows: rows looked up as evaluation does, partitions into one buffer, shapes named."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from small_models import committed, graph_edges, imported, raw_config

from pbg_core.config import parse_config
from pbg_core.errors import ShapeError
from pbg_core.model.max_norm import renorm_table_
from pbg_core.ports import CheckpointMetadata
from pbg_core.session.build import version_layout
from storage.checkpoint_reader import CheckpointReader
from storage.checkpoints import CheckpointStore
from storage.errors import DataNotFound
from storage.trained.checkpoint_rows import CheckpointRows

AT = (np.array([0, 1, 0]), np.array([2, 3, 14]))  # (partitions, offsets) of rows of 'drug'


def rows_of(tmp_path: Path, max_norm: float | None) -> CheckpointRows:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = parse_config(raw_config(tmp_path, max_norm=max_norm))
    imported(config, tmp_path / "edges.tsv", graph_edges())
    committed(config)
    return CheckpointRows(CheckpointReader(config, None, ["drug", "disease"], "to read"), max_norm)


def test_selected_rows_are_the_partitions_rows_renormed_as_evaluation_renorms_them(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, 1.5)
    parts, offsets = np.array([1, 0, 1, 0, 1]), np.array([3, 0, 3, 14, 0])
    got = rows.lookup("drug", parts, offsets)
    tables = [rows.reader.load_partition("drug", part) for part in range(2)]
    assert any(float(t.norm(dim=1).max()) > 1.5 for t in tables)
    for table in tables:
        renorm_table_(table, 1.5, settle=True)  # what rank_partition (and eval's all_negs side) does
    expected = torch.stack([tables[p][o] for p, o in zip(parts, offsets, strict=True)])
    assert torch.equal(got, expected)
    assert rows_of(tmp_path / "plain", None).lookup("drug", parts[:1], offsets[:1]).norm() > 1.5


def test_every_partition_goes_into_the_start_of_one_buffer(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, None)
    buffer = rows.buffer([("drug", 15), ("disease", 13), ("drug", 15)])
    assert buffer.numel() == 15 * 6
    for entity, part, count in (("drug", 0, 15), ("disease", 1, 13)):
        table = rows.partition(entity, part, buffer)
        assert table.data_ptr() == buffer.data_ptr() and table.shape == (count, 6)
        assert torch.equal(table, rows.reader.load_partition(entity, part))


def test_rows_that_do_not_fit_their_names_or_the_dimension_are_named(tmp_path: Path) -> None:
    """Checked from the file's header before the first read, by lookup and partition alike."""
    reader = rows_of(tmp_path, None).reader
    names = {"drug": [14, 15], "disease": [13, 13]}  # drug partition 0 holds 15 rows
    rows = CheckpointRows(reader, None, names.__getitem__)
    names_file = reader.labels.entities[("drug", 0)].url
    wanted = (
        "embeddings_drug_0.v1.h5: stored embeddings have shape (15, 6), expected (14, 6): the 14 names of entity "
        f"type 'drug' partition 0 (listed in {names_file}) and the config's dimension 6 (a file of another entity "
        "type, import or checkpoint, or another config?)"
    )
    for read in (lambda: rows.partition("drug", 0, rows.buffer([("drug", 15)])), lambda: rows.lookup("drug", *AT)):
        with pytest.raises(ShapeError) as caught:
            read()
        assert str(caught.value).endswith(wanted) and "\n" not in str(caught.value)
    assert rows.lookup("drug", np.array([1]), np.array([3])).shape == (1, 6)  # partition 1 fits
    store = CheckpointStore(reader.config.checkpoint_path)
    store.save_embeddings("disease", 0, 1, torch.zeros(13, 4), None, CheckpointMetadata(""))
    with pytest.raises(
        ShapeError,
        match=r"embeddings_disease_0.v1.h5: stored embeddings have shape \(13, 4\), expected "
        r"\(13, 6\): the 13 names",
    ):
        rows.lookup("disease", np.array([0]), np.array([2]))


def test_each_partition_header_is_read_once(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, None)
    store = rows.reader.checkpoints
    opened: list[tuple[str, int]] = []
    shape_of = store.embeddings_shape

    def counted(entity: str, part: int, version: int) -> tuple[int, int]:
        opened.append((entity, part))
        return shape_of(entity, part, version)

    store.embeddings_shape = counted  # type: ignore[method-assign]
    buffer = rows.buffer([("drug", 15)])
    for _ in range(3):
        rows.lookup("drug", *AT)
        rows.partition("drug", 0, buffer)
    assert sorted(opened) == [("drug", 0), ("drug", 1)]


def test_a_version_removed_since_it_was_loaded_is_named(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, None)
    config = rows.reader.config
    committed(config, version=2)
    store = CheckpointStore(config.checkpoint_path)
    store.remove_versions_before(store.check_complete(2, version_layout(config)))  # what a run does after a commit
    buffer = rows.buffer([("drug", 15)])
    wanted = f"{config.checkpoint_path}: version 1 was removed after this model was loaded (committed now: 2); load"
    with pytest.raises(DataNotFound, match=re.escape(wanted)):
        rows.partition("drug", 0, buffer)
    with pytest.raises(DataNotFound, match=re.escape(wanted)):
        rows.lookup("drug", np.array([0]), np.array([1]))
