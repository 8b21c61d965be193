"""Tests of the vectorized name index: hashing, first-seen ids, counts, rollback."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from storage.importing.hash_table import HashTable, hash_strings
from storage.importing.names import HashCollisionError, NameIndex, first_positions

NAMES = ["ab", "ba", "", "x" * 300, "ab", "é", "abcdefgh", "abcdefgh\x00", "abcdefghi", "a\x00"]


def test_hash_depends_on_content_not_on_the_array_slice() -> None:
    names = pa.array(NAMES)
    for full in hash_strings(names):
        assert full[0] == full[4]
        assert len(set(full.tolist())) == len(NAMES) - 1  # every other name differs, trailing NULs too
    keys, checks = hash_strings(names)
    cases = [(names.slice(1, 4), keys[1:5], checks[1:5]), (names.cast(pa.large_string()), keys, checks)]
    for sliced, k, c in cases:
        got_k, got_c = hash_strings(sliced)
        np.testing.assert_array_equal(got_k, k)
        np.testing.assert_array_equal(got_c, c)


def test_short_names_hash_the_same_alone_and_next_to_long_ones() -> None:
    # Names of <= 8 bytes take a shortcut when the whole array is short: same values either way.
    short = ["a", "n123456", "abcdefgh", ""]
    alone = hash_strings(pa.array(short))
    mixed = hash_strings(pa.array(short + ["a much longer name"]))
    for a, m in zip(alone, mixed, strict=True):
        np.testing.assert_array_equal(a, m[:4])


def test_keys_are_never_the_empty_marker() -> None:
    keys, _ = hash_strings(pa.array([f"n{i}" for i in range(10_000)]))
    assert (keys != 0).all()


def test_hash_table_finds_what_was_inserted_across_growth() -> None:
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(1, 2**63, 50_000, dtype=np.uint64))
    checks = rng.integers(0, 2**63, len(keys), dtype=np.uint64)
    table = HashTable(capacity=16)
    table.insert(keys[:100], np.arange(100), checks[:100])
    table.insert(keys[100:], np.arange(100, len(keys)), checks[100:])  # grows several times
    values, stored = table.find(keys)
    np.testing.assert_array_equal(values, np.arange(len(keys)))
    np.testing.assert_array_equal(stored, checks & np.uint64(0xFFFFFFFF))
    absent = rng.integers(1, 2**63, 1_000, dtype=np.uint64)
    absent = absent[~np.isin(absent, keys)]
    assert (table.find(absent)[0] == -1).all()


def test_hash_table_keys_in_the_same_home_slot_all_land() -> None:
    table = HashTable(capacity=64)
    keys = np.array([64 * i + 5 for i in range(1, 20)], dtype=np.uint64)  # one home slot, 19 keys
    table.insert(keys, np.arange(19), keys)
    np.testing.assert_array_equal(table.find(keys)[0], np.arange(19))


def test_names_sharing_a_key_stay_apart_across_batches_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    import storage.importing.names as names_module

    def weak(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        keys, checks = hash_strings(strings)
        return np.ones_like(keys), checks  # every name gets key 1: only the check tells them apart

    monkeypatch.setattr(names_module, "hash_strings", weak)
    index = NameIndex()
    (ids,) = index.lookup_or_add([(pa.array(["alice"]), np.array([0]))])
    assert ids.tolist() == [0]
    # Two more names on key 1 in one batch (one repeated), then everything again in two parts.
    (ids,) = index.lookup_or_add([(pa.array(["carol", "bob", "carol"]), np.array([5, 3, 7]))])
    assert ids.tolist() == [2, 1, 2] and index.names().to_pylist() == ["alice", "bob", "carol"]
    snap = index.snapshot()
    lhs, rhs = index.lookup_or_add(
        [(pa.array(["bob", "dave"]), np.array([0, 2])), (pa.array(["alice", "carol"]), np.array([1, 3]))]
    )
    assert lhs.tolist() == [1, 3] and rhs.tolist() == [0, 2]
    index.restore(snap)  # dave forgotten, the table rebuilt from the kept names' table keys
    (ids,) = index.lookup_or_add([(pa.array(["carol", "erin", "alice", "bob"]), np.arange(4))])
    assert ids.tolist() == [2, 3, 0, 1] and index.size == 4


def test_a_collision_of_both_hashes_is_reported_with_both_names(monkeypatch: pytest.MonkeyPatch) -> None:
    import storage.importing.names as names_module

    def weak(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        keys, checks = hash_strings(strings)
        return np.ones_like(keys), checks

    monkeypatch.setattr(names_module, "hash_strings", weak)
    monkeypatch.setattr(names_module, "alternate_key", lambda keys, checks: np.full_like(keys, 2))
    index = NameIndex()
    index.lookup_or_add([(pa.array(["alice", "bob"]), np.array([0, 1]))])  # bob on the alternate key 2
    with pytest.raises(HashCollisionError, match="'carol' and 'bob' collide on both"):
        index.lookup_or_add([(pa.array(["carol"]), np.array([0]))])
    fresh = NameIndex()
    with pytest.raises(HashCollisionError, match="'carol' and 'bob'|'bob' and 'carol'"):  # inside one batch
        fresh.lookup_or_add([(pa.array(["alice", "bob", "carol"]), np.array([0, 1, 2]))])


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


def test_repeated_names_in_a_part_get_one_id_by_earliest_position() -> None:
    index = NameIndex()
    (ids,) = index.lookup_or_add([(pa.array(["b", "a", "b", "c", "a"]), np.array([4, 3, 0, 1, 2]))])
    assert ids.tolist() == [0, 2, 0, 1, 2]  # b first at 0, c at 1, a at 2
    index.count(ids)
    assert index.counts.tolist() == [2, 1, 2] and index.names().to_pylist() == ["b", "c", "a"]


def test_many_key_collisions_match_a_dict_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    import storage.importing.names as names_module

    def eight_bit_keys(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        keys, checks = hash_strings(strings)
        return (keys & np.uint64(0xFF)) | np.uint64(1), checks  # 128 keys for 3,000 names

    monkeypatch.setattr(names_module, "hash_strings", eight_bit_keys)
    rng = np.random.default_rng(7)
    index, reference = NameIndex(), {}
    for batch in range(12):
        lhs, rhs = (pa.array([f"n{i}" for i in rng.integers(0, 3000, 500)]) for _ in range(2))
        rows = np.arange(500)
        got = index.lookup_or_add([(lhs, 2 * rows), (rhs, 2 * rows + 1)])
        for part, column in zip(got, (lhs, rhs), strict=True):
            for name, id_ in zip(column.to_pylist(), part.tolist(), strict=True):
                assert reference.setdefault(name, id_) == id_, (batch, name)
        if batch == 5:
            snap, kept = index.snapshot(), dict(reference)
        if batch == 8:
            index.restore(snap)
            reference = kept
    assert index.names().to_pylist() == sorted(reference, key=reference.__getitem__)
    assert len(set(reference.values())) == len(reference) == index.size
