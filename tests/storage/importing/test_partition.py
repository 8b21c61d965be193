"""storage.importing.partition: PBG's contiguous split of shuffled ids into partitions."""

from __future__ import annotations

import numpy as np
import pytest

from storage.importing.partition import EntityIndex, assign, extend, fill_counts, partition_starts


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


# --- appending imports ---


@pytest.mark.parametrize(
    ("sizes", "extra", "expected"),
    [
        ([5, 5, 5], 3, [1, 1, 1]),
        ([5, 5, 5], 4, [2, 1, 1]),
        ([2, 9, 5], 4, [4, 0, 0]),  # 2 -> 5, then the two 5s tie: the lower partition
        ([2, 9, 5], 20, [10, 3, 7]),  # all end at 12, 12, 12
        ([0, 0], 0, [0, 0]),
        ([7], 3, [3]),
    ],
)
def test_fill_counts_fills_the_smallest_partitions_first(sizes: list[int], extra: int, expected: list[int]) -> None:
    assert fill_counts(sizes, extra) == expected


@pytest.mark.parametrize("seed", range(20))
def test_fill_counts_ends_as_even_as_the_old_sizes_allow(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 50, size=int(rng.integers(1, 9))).tolist()
    extra = int(rng.integers(0, 200))
    added = fill_counts(sizes, extra)
    assert sum(added) == extra and min(added) >= 0
    final = [s + a for s, a in zip(sizes, added, strict=True)]
    grown = [f for f, a in zip(final, added, strict=True) if a]
    if grown:  # every grown partition is at the water level (within 1), none below it
        assert max(grown) - min(final) <= 1


def test_extend_keeps_every_old_name_in_place_and_appends_kept_new_names() -> None:
    old_sizes = [3, 1, 2]  # ids 0-2 in partition 0, 3 in 1, 4-5 in 2
    counts = np.array([0, 4, 0, 1, 2, 0, 3, 0, 5, 1, 1])  # ids 6.. are new; 7 is seen 0 times
    assignment = extend(old_sizes, counts, 1, np.random.default_rng(0))
    for old_id, (part, offset) in enumerate([(0, 0), (0, 1), (0, 2), (1, 0), (2, 0), (2, 1)]):
        assert (assignment.part_of[old_id], assignment.offset_of[old_id]) == (part, offset)
    assert assignment.part_of[7] == -1  # a new name below min_count is dropped, an old one never
    assert sorted(assignment.order.tolist()) == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10]
    sizes = [assignment.starts[p + 1] - assignment.starts[p] for p in range(3)]
    assert sizes == [3, 4, 3]  # fill_counts([3, 1, 2], 4) == [0, 3, 1]: 1 -> 2 -> 3, the last to the smallest
    for part in range(3):  # every id's (part, offset) matches its place in ``order``
        for offset, id_ in enumerate(assignment.part_ids(part)):
            assert (assignment.part_of[id_], assignment.offset_of[id_]) == (part, offset)


def test_extend_with_nothing_new_is_the_old_layout() -> None:
    assignment = extend([2, 2], np.array([1, 0, 0, 3]), 1, np.random.default_rng(0))
    assert assignment.order.tolist() == [0, 1, 2, 3] and assignment.starts == [0, 2, 4]
