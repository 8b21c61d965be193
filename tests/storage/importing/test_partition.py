"""storage.importing.partition: PBG's contiguous split of shuffled ids into partitions."""

from __future__ import annotations

import numpy as np
import pytest

from storage.importing.partition import EntityIndex, assign, partition_starts


@pytest.mark.parametrize(("size", "parts"), [(10, 3), (7, 7), (2, 5), (0, 4), (1000, 16)])
def test_starts_are_ceil_of_p_size_over_parts(size: int, parts: int) -> None:
    starts = partition_starts(size, parts)
    assert starts == [int(np.ceil(p * size / parts)) for p in range(parts + 1)]
    assert starts[0] == 0 and starts[-1] == size


def test_assign_keeps_ids_above_min_count_and_every_kept_id_has_one_slot() -> None:
    counts = np.array([3, 1, 5, 2, 0, 2, 9])
    got = assign(counts, 2, 3, np.random.default_rng(0))
    assert sorted(got.order.tolist()) == [0, 2, 3, 5, 6]
    assert got.starts == [0, 2, 4, 5] and got.num_partitions == 3
    assert got.part_of[[1, 4]].tolist() == [-1, -1]
    for part in range(3):
        ids = got.part_ids(part)
        assert (got.part_of[ids] == part).all()
        assert got.offset_of[ids].tolist() == list(range(len(ids)))


def test_assign_draws_one_permutation_from_the_rng() -> None:
    """The same seed gives the same layout; the generator is left exactly one permutation on."""
    counts = np.ones(50, dtype=np.int64)
    first = assign(counts, 1, 4, np.random.default_rng(7))
    again = assign(counts, 1, 4, np.random.default_rng(7))
    assert np.array_equal(first.order, again.order)
    rng = np.random.default_rng(7)
    assert np.array_equal(first.order, rng.permutation(50))


def test_entity_index_agrees_with_assign() -> None:
    """The dict view and the array version put every name in the same (partition, offset)."""
    got = assign(np.ones(11, dtype=np.int64), 1, 4, np.random.default_rng(3))
    names = [f"n{i}" for i in got.order]
    index = EntityIndex(names, 4)
    for i in range(11):
        assert index.locate(f"n{i}") == (int(got.part_of[i]), int(got.offset_of[i]))
    assert index.locate("unknown") is None
    assert index.part_names(1) == [f"n{i}" for i in got.part_ids(1)]
