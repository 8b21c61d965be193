"""EmbeddingPool: shared allocation, slot invariants, views rebuilt from a slot map."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.multiprocessing

from pbg_core.errors import ShapeError, UnknownNameError
from pbg_core.parallel.memory import EmbeddingPool, SlotError, SlotSpec, shared_empty
from pbg_core.types import Side


@pytest.fixture()
def pool() -> EmbeddingPool:
    return EmbeddingPool.allocate(
        {"user": SlotSpec(max_count=5, dim=3, num_slots=2), "item": SlotSpec(max_count=4, dim=2, num_slots=1)}
    )


def test_buffers_are_shared_float32_with_expected_shapes(pool: EmbeddingPool) -> None:
    buffers = pool.buffers()
    assert buffers.embeddings["user"].shape == (2, 5, 3)
    assert buffers.state["user"].shape == (2, 5)
    assert buffers.embeddings["item"].shape == (1, 4, 2)
    for tensor in [*buffers.embeddings.values(), *buffers.state.values()]:
        assert tensor.is_shared() and tensor.dtype == torch.float32


def test_shared_empty_shape_and_contiguity() -> None:
    tensor = shared_empty((3, 4))
    assert tensor.shape == (3, 4) and tensor.is_contiguous() and tensor.is_shared()
    tensor.copy_(torch.arange(12.0).view(3, 4))
    assert tensor[2, 3].item() == 11.0


def test_acquire_gives_views_of_distinct_slots(pool: EmbeddingPool) -> None:
    first = pool.acquire("user", 3, count=4)
    second = pool.acquire("user", 0, count=5)
    assert (first.slot, second.slot) == (0, 1)
    assert first.embeddings.shape == (4, 3) and first.state.shape == (4,)
    first.embeddings.fill_(1.0)
    second.embeddings.fill_(2.0)
    first.state.fill_(7.0)
    raw = pool.buffers().embeddings["user"]
    assert raw[0, :4].eq(1.0).all() and raw[1].eq(2.0).all()
    assert pool.buffers().state["user"][0, :4].tolist() == [7.0] * 4
    assert first.ref == (0, 4)
    assert pool.lookup("user", 3) is first
    assert pool.lookup("user", 1) is None
    assert pool.held() == [("user", 0), ("user", 3)]


def test_release_frees_the_slot_for_reuse(pool: EmbeddingPool) -> None:
    first = pool.acquire("user", 3, count=4)
    pool.acquire("user", 1, count=1)
    assert pool.free_slots("user") == 0
    pool.release(first)
    assert pool.lookup("user", 3) is None and pool.free_slots("user") == 1
    again = pool.acquire("user", 2, count=5)
    assert again.slot == 0


def test_double_acquire_is_refused(pool: EmbeddingPool) -> None:
    pool.acquire("user", 3, count=4)
    with pytest.raises(SlotError, match="'user' partition 3 is already held in slot 0"):
        pool.acquire("user", 3, count=4)


def test_no_free_slot_names_the_holders(pool: EmbeddingPool) -> None:
    pool.acquire("item", 0, count=4)
    with pytest.raises(
        SlotError, match=r"no free slot for entity type 'item' partition 1: all 1 slots hold partitions \[0\]"
    ):
        pool.acquire("item", 1, count=1)


def test_double_release_is_refused(pool: EmbeddingPool) -> None:
    handle = pool.acquire("user", 1, count=2)
    pool.release(handle)
    with pytest.raises(SlotError, match="slot 0 of entity type 'user' .partition 1.: it is not held"):
        pool.release(handle)
    assert pool.free_slots("user") == 2  # the refused release changed nothing


def test_count_bounds_and_unknown_entity(pool: EmbeddingPool) -> None:
    with pytest.raises(ShapeError, match=r"cannot hold 6 rows of entity type 'user' partition 0: .*max_count=5"):
        pool.acquire("user", 0, count=6)
    with pytest.raises(UnknownNameError, match="'movie'; known: item, user"):
        pool.acquire("movie", 0, count=1)
    assert pool.held() == []


def test_bad_spec_is_refused() -> None:
    with pytest.raises(ShapeError, match="bad slot spec for entity type 'x'"):
        EmbeddingPool.allocate({"x": SlotSpec(max_count=3, dim=0, num_slots=1)})


def test_views_share_one_table_for_the_same_slot(pool: EmbeddingPool) -> None:
    left = pool.acquire("user", 0, count=5)
    right = pool.acquire("user", 1, count=2)
    item = pool.acquire("item", 0, count=3)
    buffers = pool.buffers()
    diagonal = {("user", Side.LHS): left.ref, ("user", Side.RHS): left.ref, ("item", Side.RHS): item.ref}
    embeddings, state = buffers.views(diagonal)
    assert embeddings["user", Side.LHS] is embeddings["user", Side.RHS]
    assert state["user", Side.LHS] is state["user", Side.RHS]
    assert embeddings["item", Side.RHS].shape == (3, 2)
    off_diagonal = {("user", Side.LHS): left.ref, ("user", Side.RHS): right.ref}
    embeddings, _ = buffers.views(off_diagonal)
    embeddings["user", Side.RHS].fill_(9.0)
    assert right.embeddings.eq(9.0).all() and not left.embeddings.eq(9.0).any()


def test_views_check_slot_and_count(pool: EmbeddingPool) -> None:
    buffers = pool.buffers()
    with pytest.raises(ShapeError, match=r"slot 2 of entity type 'user' is not in \[0, 2\)"):
        buffers.views({("user", Side.LHS): (2, 1)})
    with pytest.raises(ShapeError, match=r"count 6 of entity type 'user' is not in \[0, 5\]"):
        buffers.views({("user", Side.LHS): (0, 6)})


def test_buffers_pickle_as_shared_memory_not_copies(pool: EmbeddingPool) -> None:
    handle = pool.acquire("item", 0, count=4)
    handle.embeddings.zero_()
    # Within one process, torch's reducers rebuild the same shared storage.
    clone = pickle.loads(ForkingPickler.dumps(pool.buffers()))
    clone.embeddings["item"][0, 1, 1] = 3.5
    assert handle.embeddings[1, 1].item() == 3.5
