"""Two 64-bit hashes per string, and an open-addressing table of hashes, all in whole-array numpy.

Why not a Python ``dict`` or a sorted array: a dict lookup costs about a microsecond once it
holds a million names, and a binary search over a million sorted hashes about 150 ns (twenty
dependent cache misses); either would cap an import near 1M edges/s. Here a name costs a few
vectorized passes over its 8-byte words, and a lookup one or two gathers into the table.

**Hashes** (:func:`hash_strings`). A name's UTF-8 bytes are read as little-endian 8-byte
words (the last one zero-padded). Two independent hashes are computed:

- ``key``: a polynomial in the words (``sum w_k * M**(k+1)`` mod 2**64), mixed with the
  length and finished with splitmix64. It addresses the table.
- ``check``: the sum of ``splitmix64(w_k + k * G + 1)``, mixed with the length. Its low 32
  bits are kept next to the key and compared on every hit, so two names that share a ``key``
  are told apart (the later one is stored under :func:`alternate_key`, see
  :class:`storage.importing.names.NameIndex`). Two names are merged only if 96 bits of two
  independent hashes collide (about 10^-11 for a billion names), and the two are computed
  differently (a polynomial over the words, and a sum of non-linear word mixes), so the
  structured inputs that defeat one do not defeat the other.

A name of up to 8 bytes is one word; when every name of an array is, the gathers are skipped
(same values as the general path). Names never depend on the slice or the batch they come in.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the polynomial (the golden ratio)
_GOLD = np.uint64(0xD6E8FEB86659FD93)  # position salt of the check hash
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_LEN_CHECK = np.uint64(0xC2B2AE3D27D4EB4F)
_ALT_SALT = np.uint64(0x165667B19E3779F9)

# _TAIL_MASK[r]: the low r bytes of a little-endian word (r = 0..8).
_TAIL_MASK = np.array([(1 << (8 * r)) - 1 for r in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_POWERS = np.cumprod(np.full(64, _MULT, dtype=np.uint64), dtype=np.uint64)  # M**1, M**2, ...


class HashCollisionError(RuntimeError):
    """Two different names share a 64-bit hash (astronomically rare; names both)."""


def _splitmix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, in place on ``h`` (a bijection of uint64)."""
    h ^= h >> np.uint64(30)
    h *= _MIX1
    h ^= h >> np.uint64(27)
    h *= _MIX2
    h ^= h >> np.uint64(31)
    return h


def _powers(count: int) -> np.ndarray:
    global _POWERS
    if count > len(_POWERS):
        _POWERS = np.cumprod(np.full(2 * count, _MULT, dtype=np.uint64), dtype=np.uint64)
    return _POWERS


def _string_layout(strings: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(byte starts, byte lengths, words view) of a ``string``/``large_string``/``binary`` array.

    The words view is an unaligned ``uint64`` array with a 1-byte stride over a zero-padded
    copy of the data: ``view[i]`` is the 8 bytes starting at byte ``i``.
    """
    n = len(strings)
    offset_type = (
        np.int64 if pa.types.is_large_string(strings.type) or pa.types.is_large_binary(strings.type) else np.int32
    )
    _, offsets_buf, data_buf = strings.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[strings.offset : strings.offset + n + 1].astype(np.int64)
    begin, end = int(offsets[0]), int(offsets[-1])
    padded = np.zeros(end - begin + 8, dtype=np.uint8)
    if end > begin:
        padded[: end - begin] = np.frombuffer(data_buf, dtype=np.uint8, count=end)[begin:]
    view = np.ndarray(shape=(end - begin + 1,), dtype=np.uint64, buffer=padded, strides=(1,))
    return offsets[:-1] - begin, np.diff(offsets), view


def hash_strings(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(key, check)``: two uint64 hashes of every string of ``strings`` (nulls read as empty).

    ``key`` is never 0 (the table's empty marker).
    """
    n = len(strings)
    if n == 0:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64)
    starts, lengths, view = _string_layout(strings)
    with np.errstate(over="ignore"):
        if int(lengths.max()) <= 8:
            words = view[starts] & _TAIL_MASK[lengths]
            key = words * _MULT
            check = _splitmix(words + np.uint64(1))
            check[lengths == 0] = 0  # no word at all, as on the general path
        else:
            key, check = _long_sums(starts, lengths, view)
        ulen = lengths.astype(np.uint64)
        key = _splitmix(key ^ (ulen * _MIX2))
        check = _splitmix(check + ulen * _LEN_CHECK)
    key[key == 0] = 1
    return key, check


def alternate_key(keys: np.ndarray, checks: np.ndarray) -> np.ndarray:
    """The table key of a name whose own ``key`` is already held by another name (never 0)."""
    with np.errstate(over="ignore"):
        alt = _splitmix(keys ^ (checks * _MIX1) ^ _ALT_SALT)
    alt[alt == 0] = 1
    return alt


def _long_sums(starts: np.ndarray, lengths: np.ndarray, view: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two word sums when some string is longer than one word."""
    num_words = (lengths + 7) >> 3
    first_word = np.concatenate(([0], np.cumsum(num_words)))
    total = int(first_word[-1])
    owner = np.repeat(np.arange(len(lengths)), num_words)
    k = np.arange(total, dtype=np.int64) - first_word[:-1][owner]
    words = view[starts[owner] + 8 * k] & _TAIL_MASK[np.minimum(lengths[owner] - 8 * k, 8)]
    poly = np.concatenate(([np.uint64(0)], np.cumsum(words * _powers(int(num_words.max()))[k], dtype=np.uint64)))
    mixed = _splitmix(words + k.astype(np.uint64) * _GOLD + np.uint64(1))
    mixes = np.concatenate(([np.uint64(0)], np.cumsum(mixed, dtype=np.uint64)))
    return poly[first_word[1:]] - poly[first_word[:-1]], mixes[first_word[1:]] - mixes[first_word[:-1]]


_SLOT = np.dtype((np.void, 16))  # one slot: key, then (value << 32 | low 32 bits of check)
STORED_CHECK_MASK = np.uint64(0xFFFFFFFF)  # the bits of a check hash a slot keeps


class HashTable:
    """Open addressing with linear probing: distinct nonzero uint64 keys -> (value, check).

    A slot is 16 bytes: the key, then the value (< 2**31) and the low 32 bits of the key's
    check hash. A lookup gathers whole slots with ``np.take`` (one random access per probe;
    measured three times faster than separate key, value and check arrays). The table
    doubles when half full, so probes stay short (about 1.5 for a hit).
    """

    def __init__(self, capacity: int = 1 << 16) -> None:
        self._slots = np.zeros((capacity, 2), dtype=np.uint64)  # key 0 = empty
        self.size = 0

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(value, check's low 32 bits) of each key; value -1 where absent. Read-only: threads may share it."""
        mask = len(self._slots) - 1
        table = self._slots.view(_SLOT).ravel()
        slot = (keys & np.uint64(mask)).astype(np.int64)
        stored = np.take(table, slot).view(np.uint64).reshape(-1, 2)
        hit = stored[:, 0] == keys
        payload = np.where(hit, stored[:, 1], np.uint64(0))
        values = np.where(hit, (payload >> np.uint64(32)).astype(np.int64), -1)
        todo = np.flatnonzero(~hit & (stored[:, 0] != 0))  # the slot holds another key: probe on
        slot = (slot[todo] + 1) & mask
        while len(todo):
            stored = np.take(table, slot).view(np.uint64).reshape(-1, 2)
            hit = stored[:, 0] == keys[todo]
            found = stored[:, 1][hit]
            payload[todo[hit]] = found
            values[todo[hit]] = (found >> np.uint64(32)).astype(np.int64)
            go_on = ~hit & (stored[:, 0] != 0)
            todo, slot = todo[go_on], (slot[go_on] + 1) & mask
        return values, payload & STORED_CHECK_MASK

    def insert(self, keys: np.ndarray, values: np.ndarray, checks: np.ndarray) -> None:
        """Add distinct ``keys`` that are not in the table yet, with their values (< 2**31) and checks."""
        if 2 * (self.size + len(keys)) > len(self._slots):
            self._grow(self.size + len(keys))
        payload = (values.astype(np.uint64) << np.uint64(32)) | (checks & STORED_CHECK_MASK)
        self._place(np.stack([keys, payload], axis=1))
        self.size += len(keys)

    def _place(self, rows: np.ndarray) -> None:
        mask = len(self._slots) - 1
        slot = (rows[:, 0] & np.uint64(mask)).astype(np.int64)
        while len(rows):
            free = self._slots[slot, 0] == 0
            # Keys aiming at the same free slot: the last write wins, the others probe on.
            self._slots[slot[free], 0] = rows[free, 0]
            won = self._slots[slot, 0] == rows[:, 0]
            self._slots[slot[won], 1] = rows[won, 1]
            lost = ~won
            rows, slot = rows[lost], (slot[lost] + 1) & mask

    def _grow(self, needed: int) -> None:
        rows = self._slots[self._slots[:, 0] != 0]
        capacity = len(self._slots)
        while 2 * needed > capacity:
            capacity *= 2
        self._slots = np.zeros((capacity, 2), dtype=np.uint64)
        self._place(rows)
