"""pbg_core.session.partition_reads: filling a slot, and growing a partition from a smaller init_path save."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pbg_core.errors import ShapeError
from pbg_core.parallel.memory import EmbeddingPool, SlotHandle, SlotSpec
from pbg_core.ports import CheckpointMetadata
from pbg_core.session.build import check_checkpoint_fits
from pbg_core.session.partition_reads import Source, fill
from pbg_core.training.optimizers import RowAdagrad, state_to_bytes
from storage.checkpoints import CheckpointStore
from storage.new_rows import NewRowsFile

META = CheckpointMetadata(config_json="{}")


def saved(tmp_path: Path, rows: int, dim: int = 4) -> tuple[CheckpointStore, torch.Tensor, torch.Tensor]:
    """An init_path checkpoint whose partition ("e", 0) has ``rows`` rows, with their Adagrad sums."""
    store = CheckpointStore(str(tmp_path / "init"))
    embeddings = torch.randn(rows, dim, generator=torch.Generator().manual_seed(1))
    sums = torch.rand(rows, generator=torch.Generator().manual_seed(2))
    store.save_embeddings("e", 0, 1, embeddings, state_to_bytes(RowAdagrad.state_dict(sums)), META)
    return store, embeddings, sums


def slot(rows: int, dim: int = 4) -> SlotHandle:
    pool = EmbeddingPool.allocate({"e": SlotSpec(max_count=rows, dim=dim, num_slots=1)})
    return pool.acquire("e", 0, rows)


def test_a_grown_partition_keeps_the_old_rows_and_their_state_and_starts_the_new_ones_fresh(tmp_path: Path) -> None:
    store, embeddings, sums = saved(tmp_path, rows=5)
    handle = slot(8)
    read = fill(handle, Source("init_path version 1", store, 1, grows=True), seed=3, init_scale=1e-3)
    assert read == 5 * 4 * 4
    torch.testing.assert_close(handle.embeddings[:5], embeddings)
    torch.testing.assert_close(handle.state[:5], sums)
    fresh = slot(8)
    fill(fresh, Source("random"), seed=3, init_scale=1e-3)  # what a fresh model's rows are
    torch.testing.assert_close(handle.embeddings[5:], fresh.embeddings[5:])
    assert torch.all(handle.state[5:] == 0)


def test_a_partition_with_more_rows_than_the_entity_files_is_refused(tmp_path: Path) -> None:
    store, _, _ = saved(tmp_path, rows=9)
    with pytest.raises(ShapeError, match="has 9 rows of entity type 'e' partition 0, more than the 8"):
        fill(slot(8), Source("init_path version 1", store, 1, grows=True), seed=0, init_scale=1e-3)


def test_only_a_source_that_may_grow_accepts_fewer_rows(tmp_path: Path) -> None:
    store, _, _ = saved(tmp_path, rows=5)
    with pytest.raises(ShapeError):
        fill(slot(8), Source("version 1", store, 1), seed=0, init_scale=1e-3)


def test_the_check_before_training_lets_init_path_grow_but_not_change_dimension(tmp_path: Path) -> None:
    store, _, _ = saved(tmp_path, rows=5)
    check_checkpoint_fits(store, 1, {("e", 0): 8}, {"e": 4}, required=False, may_grow=True)
    with pytest.raises(ShapeError, match=r"stored shape \(5, 4\), this config expects \(8, 4\)"):
        check_checkpoint_fits(store, 1, {("e", 0): 8}, {"e": 4}, required=False)
    with pytest.raises(ShapeError, match=r"expects \(8, 6\)"):
        check_checkpoint_fits(store, 1, {("e", 0): 8}, {"e": 6}, required=False, may_grow=True)
    with pytest.raises(ShapeError, match=r"expects \(3, 4\)"):
        check_checkpoint_fits(store, 1, {("e", 0): 3}, {"e": 4}, required=False, may_grow=True)


def test_prepared_new_rows_replace_the_random_start_of_those_rows_only(tmp_path: Path) -> None:
    store, embeddings, _ = saved(tmp_path, rows=5)
    rows = NewRowsFile(str(tmp_path / "run"))
    mean = torch.full((1, 4), 0.25)
    rows.save({("e", 0): (torch.tensor([6]), mean, torch.tensor([2.5]))}, {"init_path": "x"})
    handle, fresh = slot(8), slot(8)
    fill(handle, Source("init_path version 1", store, 1, grows=True, new_rows=rows), seed=3, init_scale=1e-3)
    fill(fresh, Source("random"), seed=3, init_scale=1e-3)
    torch.testing.assert_close(handle.embeddings[:5], embeddings)
    torch.testing.assert_close(handle.embeddings[6:7], mean)
    torch.testing.assert_close(handle.embeddings[[5, 7]], fresh.embeddings[[5, 7]])  # no neighbor: random
    assert handle.state[5:].tolist() == [0.0, 2.5, 0.0]  # the neighbors' mean Adagrad sum; fresh rows 0
