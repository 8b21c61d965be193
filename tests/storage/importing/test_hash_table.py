"""storage.importing.hash_table: the two string hashes and the open-addressing table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from storage.importing.hash_table import STORED_CHECK_MASK, HashTable, alternate_key, hash_strings

_NAMES = ["", "a", "b", "ab", "ba", "12345678", "123456789", "a" * 40, "é名前", "x" * 17, "x" * 16 + "\0"]


def test_hashes_do_not_depend_on_the_batch_slice_or_string_type() -> None:
    """Short-only batches take a separate path; a name must hash the same either way."""
    key, check = hash_strings(pa.array(_NAMES))
    for i, name in enumerate(_NAMES):
        one_key, one_check = hash_strings(pa.array([name]))
        assert (one_key[0], one_check[0]) == (key[i], check[i]), name
    sliced = hash_strings(pa.array(["pad", *_NAMES]).slice(1))
    large = hash_strings(pa.array(_NAMES, type=pa.large_string()))
    for got in (sliced, large):
        assert np.array_equal(got[0], key) and np.array_equal(got[1], check)


def test_distinct_names_get_distinct_keys_and_checks_and_no_zero_key() -> None:
    rng = np.random.default_rng(0)
    names = sorted({"".join(rng.choice(list("ab\0é"), size=rng.integers(0, 20))) for _ in range(3000)})
    key, check = hash_strings(pa.array(names))
    assert len(np.unique(key)) == len(names) and len(np.unique(check)) == len(names)
    assert not (key == 0).any()


def test_nulls_hash_as_the_empty_name_and_empty_input_gives_empty_arrays() -> None:
    key, check = hash_strings(pa.array([None, ""], type=pa.string()))
    assert key[0] == key[1] and check[0] == check[1]
    assert [len(a) for a in hash_strings(pa.array([], type=pa.string()))] == [0, 0]


def test_alternate_key_differs_from_the_key_and_is_never_zero() -> None:
    key, check = hash_strings(pa.array(_NAMES))
    alt = alternate_key(key, check)
    assert not (alt == key).any() and not (alt == 0).any()
    assert len(np.unique(alt)) == len(_NAMES)


def test_table_round_trips_values_and_low_check_bits_and_misses_give_minus_one() -> None:
    key, check = hash_strings(pa.array([f"name{i}" for i in range(5000)]))
    table = HashTable(capacity=8)  # grows several times on the way
    table.insert(key[:3000], np.arange(3000), check[:3000])
    table.insert(key[3000:4000], np.arange(3000, 4000), check[3000:4000])
    values, checks = table.find(key)
    assert table.size == 4000
    assert np.array_equal(values[:4000], np.arange(4000)) and (values[4000:] == -1).all()
    assert np.array_equal(checks[:4000], check[:4000] & STORED_CHECK_MASK)


def test_keys_colliding_on_a_slot_are_probed_past() -> None:
    """Keys equal modulo the capacity all aim at slot 5: linear probing must keep them apart."""
    table = HashTable(capacity=64)
    keys = np.array([5 + 64 * i for i in range(1, 20)], dtype=np.uint64)
    table.insert(keys[:10], np.arange(10) * 7, np.arange(10, dtype=np.uint64))
    table.insert(keys[10:], np.arange(10, 19) * 7, np.arange(10, 19, dtype=np.uint64))
    values, checks = table.find(np.concatenate([keys, np.array([5, 5 + 64 * 40], dtype=np.uint64)]))
    assert values.tolist() == [7 * i for i in range(19)] + [-1, -1]
    assert checks[:19].tolist() == list(range(19))
