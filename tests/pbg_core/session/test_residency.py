"""PartitionResidency on its own: where a partition is read from, where its saves go, swaps.

Real stores on a temporary directory (storage.checkpoints.CheckpointStore and its progress area,
storage.progress.CheckpointProgress), a real shared-memory pool: one entity type "node" in two
partitions of 3 and 2 rows, dimension 4, two slots.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pbg_core.errors import PbgError
from pbg_core.parallel.memory import EmbeddingPool, SlotSpec
from pbg_core.ports import FINAL
from pbg_core.session.partition_io import PartitionIo
from pbg_core.session.parts import MetadataSource
from pbg_core.session.residency import PartitionResidency
from storage.checkpoints import CheckpointStore
from storage.errors import StorageError
from storage.progress import CheckpointProgress

COUNTS = {("node", 0): 3, ("node", 1): 2}
DIM = 4
A, B = ("node", 0), ("node", 1)


def residency(
    tmp_path: Path, committed: int = 0, init: CheckpointStore | None = None, seed: int = 7, slots: int = 2
) -> PartitionResidency:
    store = CheckpointStore(str(tmp_path / "ckpt"))
    pool = EmbeddingPool.allocate({"node": SlotSpec(max_count=3, dim=DIM, num_slots=slots)})
    return PartitionResidency(
        pool=pool,
        store=store,
        init_store=init,
        counts=dict(COUNTS),
        init_scale=0.001,
        seed=seed,
        committed_version=committed,
        metadata=MetadataSource("{}"),
        progress=CheckpointProgress(store),
    )


def stored(store: CheckpointStore, key: tuple[str, int], version: int) -> torch.Tensor:
    out = torch.empty(COUNTS[key], DIM)
    store.load_embeddings(key[0], key[1], version, out=out)
    return out


def test_a_new_run_initialises_at_random_seeded_and_scaled(tmp_path: Path) -> None:
    first, again, other = residency(tmp_path), residency(tmp_path / "2"), residency(tmp_path / "3", seed=8)
    for res in (first, again, other):
        res.ensure_resident([A])
    rows = first.handle(A).embeddings.clone()
    assert rows.shape == (3, DIM) and 0 < rows.abs().max() < 0.01  # init_scale 0.001
    assert torch.equal(rows, again.handle(A).embeddings)  # the seed decides
    assert not torch.equal(rows, other.handle(A).embeddings)
    assert first.io.bytes_read == 0  # nothing was read


def test_saves_of_a_pass_go_to_the_bucket_area_and_are_read_back_from_there(tmp_path: Path) -> None:
    res = residency(tmp_path)
    res.ensure_resident([A, B])
    res.handle(A).embeddings.fill_(1.5)
    res.mark_dirty([A], position=0)
    assert res.save_dirty(0) == [A]  # B is clean: not written
    assert res.locations == {A: 0} and res.dirty == set()
    area = res.progress.area(1, 0)  # type: ignore[union-attr]  # progress is set above
    assert torch.equal(stored(area, A, 1), torch.full((3, DIM), 1.5))
    assert not res.store.has_embeddings("node", 0, 1)  # not the version's own file yet

    assert res.make_room([B], {"node": 1}, {}) == [A]
    assert set(res.resident) == {B}
    res.ensure_resident([A])  # read back from its save of this pass, not re-initialised
    assert torch.equal(res.handle(A).embeddings, torch.full((3, DIM), 1.5))


def test_completing_the_version_writes_every_partition_under_its_own_name(tmp_path: Path) -> None:
    res = residency(tmp_path)
    res.ensure_resident([A])
    res.handle(A).embeddings.fill_(2.0)
    res.mark_dirty([A], position=0)
    res.save_dirty(0)
    res.complete_open_version([A, B])  # A promoted from the area; B never touched: initialised and written
    assert torch.equal(stored(res.store, A, 1), torch.full((3, DIM), 2.0))
    assert res.store.has_embeddings("node", 1, 1)
    res.store.write_version(1)
    res.commit(1)
    assert (res.committed_version, res.locations, res.dirty) == (1, {}, set())


def test_a_committed_version_is_read_before_init_path_and_a_missing_partition_is_an_error(tmp_path: Path) -> None:
    init = CheckpointStore(str(tmp_path / "init"))
    init.save_embeddings("node", 0, 1, torch.full((3, DIM), 9.0), None, MetadataSource("{}")())
    init.save_embeddings("node", 1, 1, torch.full((2, DIM), 9.0), None, MetadataSource("{}")())
    init.write_version(1)

    fresh = residency(tmp_path / "a", init=init)
    fresh.ensure_resident([A])
    assert torch.equal(fresh.handle(A).embeddings, torch.full((3, DIM), 9.0))  # from init_path
    assert fresh.io.bytes_read == 3 * DIM * 4

    trained = residency(tmp_path / "b", init=init)
    trained.store.save_embeddings("node", 0, 2, torch.full((3, DIM), 4.0), None, MetadataSource("{}")())
    trained.committed_version = 2
    trained.ensure_resident([A])
    assert torch.equal(trained.handle(A).embeddings, torch.full((3, DIM), 4.0))  # the committed version wins
    with pytest.raises(PbgError, match=r"version 2 has no embeddings for entity type 'node' partition 1"):
        trained.ensure_resident([B])  # never papered over with init_path's (stale) or random rows


def test_restore_reloads_the_saves_of_an_interrupted_pass(tmp_path: Path) -> None:
    first = residency(tmp_path)
    first.ensure_resident([A])
    first.handle(A).embeddings.fill_(3.0)
    first.mark_dirty([A], position=1)
    first.save_dirty(1)
    first.release_all()

    resumed = residency(tmp_path)  # a new process, same checkpoint
    resumed.ensure_resident([A])  # from random init: it does not know the pass yet
    assert not torch.equal(resumed.handle(A).embeddings, torch.full((3, DIM), 3.0))
    resumed.restore({A: 1})
    assert torch.equal(resumed.handle(A).embeddings, torch.full((3, DIM), 3.0))

    (tmp_path / "ckpt" / "progress" / "v1-b1").rename(tmp_path / "moved")  # changed from outside
    resumed.make_room([], {"node": 0}, {})
    with pytest.raises(PbgError, match="saved after bucket 1.*file is missing"):
        resumed.ensure_resident([A])


def test_a_clean_partition_is_not_written_and_slots_come_back(tmp_path: Path) -> None:
    res = residency(tmp_path, slots=1)
    res.ensure_resident([A])
    assert res.save(A) is False
    res.make_room([B], {"node": 1}, {})  # frees the only slot
    res.ensure_resident([B])
    assert set(res.resident) == {B} and res.io.bytes_written == 0
    res.release_all()
    assert res.resident == {}
    assert FINAL not in res.locations.values()


def test_make_room_evicts_what_later_buckets_need_least_then_the_least_recently_used(tmp_path: Path) -> None:
    res = residency(tmp_path, slots=2)
    res.ensure_resident([A])
    res.ensure_resident([B])
    assert res.make_room([A], {"node": 2}, {}) == []  # room for both: nothing leaves
    res.ensure_resident([A])  # used again: B is now the least recently used
    assert res.make_room([], {"node": 1}, {A: 0, B: 3}) == [A]  # A is needed by no later bucket
    assert set(res.resident) == {B}
    res.ensure_resident([A])
    res.ensure_resident([B])
    assert res.make_room([], {"node": 1}, {A: 1, B: 1}) == [A]  # a tie: the least recently used


def test_a_partition_read_ahead_is_adopted_and_one_written_behind_is_read_back_after_its_write(
    tmp_path: Path,
) -> None:
    res = residency(tmp_path, slots=2)
    res.io_thread = PartitionIo()
    try:
        res.ensure_resident([A])
        res.handle(A).embeddings.fill_(1.5)
        res.mark_dirty([A], position=0)
        assert res.prefetch([B]) == [B]  # a free slot: read on the I/O thread
        assert res.prefetch([A, B]) == []  # resident, in flight
        res.ensure_resident([B])
        assert set(res.resident) == {A, B} and res.io.background_seconds > 0
        assert res.make_room([B], {"node": 1}, {}) == [A]  # dirty: written behind
        assert A not in res.resident and A not in res.dirty and A in res.io_thread.pending
        res.ensure_resident([A])  # waits for the write, then reads that save back
        assert torch.equal(res.handle(A).embeddings, torch.full((3, DIM), 1.5))
        assert res.locations == {A: 0} and res.io.bytes_written == 3 * DIM * 4 + 3 * 4
    finally:
        res.release_all()
    assert res.io_thread is None and res.pool.free_slots("node") == 2


def test_a_failed_write_behind_leaves_the_partition_resident_and_dirty_for_a_retry(tmp_path: Path) -> None:
    res = residency(tmp_path, slots=2)
    res.io_thread = PartitionIo()
    try:
        res.ensure_resident([A])
        res.mark_dirty([A], position=0)
        blocker = tmp_path / "ckpt" / "progress" / "v1-b0"  # a file where the area's directory goes
        blocker.parent.mkdir(parents=True)
        blocker.write_text("in the way")
        res.make_room([], {"node": 0}, {})
        with pytest.raises(StorageError, match="v1-b0"):
            res.settle()
        assert A in res.resident and A in res.dirty and A not in res.locations
    finally:
        res.release_all()
