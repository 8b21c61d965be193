"""Tests of the vectorized name index: hashing, first-seen ids, counts, rollback."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from storage.import_names import NameIndex, first_positions, hash_strings


def test_hash_depends_on_content_not_on_the_array_slice() -> None:
    names = pa.array(["ab", "ba", "", "x" * 300, "ab", "é"])
    full = hash_strings(names)
    assert full[0] == full[4] and len(set(full[:4].tolist() + [full[5]])) == 5
    np.testing.assert_array_equal(hash_strings(names.slice(1, 4)), full[1:5])
    np.testing.assert_array_equal(hash_strings(names.cast(pa.large_string())), full)


def test_first_positions_picks_the_earliest_row() -> None:
    indices = np.array([2, 0, 2, 1, 0])
    positions = np.array([10, 11, 12, 13, 14])
    np.testing.assert_array_equal(first_positions(indices, 4, positions), [11, 13, 10, np.iinfo(np.int64).max])


def test_ids_follow_first_position_across_parts_and_batches() -> None:
    index = NameIndex()
    # Batch 1: lhs part {b at 2, a at 0}, rhs part {c at 1, a at 3}: first seen a(0), c(1), b(2).
    lhs, rhs = index.lookup_or_add([(pa.array(["b", "a"]), np.array([2, 0])), (pa.array(["c", "a"]), np.array([1, 3]))])
    assert lhs.tolist() == [2, 0] and rhs.tolist() == [1, 0]
    (ids,) = index.lookup_or_add([(pa.array(["z", "c", "y"]), np.array([5, 0, 1]))])
    assert ids.tolist() == [4, 1, 3]
    assert index.names().to_pylist() == ["a", "c", "b", "y", "z"]


def test_counts_and_restore_forget_a_discarded_file() -> None:
    index = NameIndex()
    (ids,) = index.lookup_or_add([(pa.array(["a", "b"]), np.array([0, 1]))])
    index.add_counts(ids, np.array([3, 1]))
    snap = index.snapshot()
    (ids,) = index.lookup_or_add([(pa.array(["b", "c"]), np.array([0, 1]))])
    index.add_counts(ids, np.array([5, 5]))
    index.restore(snap)
    assert index.size == 2 and index.counts.tolist() == [3, 1]
    (ids,) = index.lookup_or_add([(pa.array(["d", "a"]), np.array([0, 1]))])
    assert ids.tolist() == [2, 0] and index.names().to_pylist() == ["a", "b", "d"]
