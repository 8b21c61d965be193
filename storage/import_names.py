"""Name -> dense id dictionaries for the importer, vectorized (no Python object per name).

A Python ``dict`` costs about a microsecond per lookup once it holds a million names (cache
misses on keys and entries), which alone would cap an import near 1M edges/s. A
:class:`NameIndex` instead keeps, per entity type:

- ``names``: the names by id, as pyarrow string chunks (about 11 bytes per short name);
- a sorted ``uint64`` array of 64-bit name hashes with the id of each (12 bytes per name),
  searched with ``numpy.searchsorted``;
- ``counts``: occurrences per id.

Hashes are computed with numpy over the Arrow string buffers (:func:`hash_strings`). A hash
match is confirmed by comparing the strings (vectorized), so two names can never be merged
silently: a 64-bit collision (odds about 1e-8 for 1M names) raises :class:`HashCollisionError`.

Ids follow the order in which names are first seen, given by caller-supplied positions, so the
numbering does not depend on how the input was cut into batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier of the polynomial hash
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _make_powers(length: int) -> np.ndarray:
    """``M**1 .. M**length`` mod 2**64 (wrapping is the point)."""
    return np.cumprod(np.full(length, _MULT, dtype=np.uint64), dtype=np.uint64)


_POWERS = _make_powers(256)  # grown on demand


class HashCollisionError(RuntimeError):
    """Two different names share a 64-bit hash (astronomically rare; names both)."""


def _powers(max_len: int) -> np.ndarray:
    global _POWERS
    if max_len > len(_POWERS):
        _POWERS = _make_powers(2 * max_len)
    return _POWERS


def hash_strings(strings: pa.Array) -> np.ndarray:
    """64-bit hashes of the non-null strings of ``strings`` (``string`` or ``large_string``).

    A polynomial hash over the UTF-8 bytes (byte j weighted by ``M**(j+1)`` mod 2**64),
    mixed with the length, then a splitmix64 finalizer. All steps are whole-array numpy.
    """
    n = len(strings)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    offset_type = np.int64 if pa.types.is_large_string(strings.type) else np.int32
    _, offsets_buf, data_buf = strings.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[strings.offset : strings.offset + n + 1].astype(np.int64)
    begin, end = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data_buf, dtype=np.uint8, count=end, offset=0)[begin:] if data_buf is not None else None
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        if data is None or end == begin:
            sums = np.zeros(n, dtype=np.uint64)
        else:
            starts = offsets[:-1] - begin
            position = np.arange(end - begin, dtype=np.int64) - np.repeat(starts, lengths)
            weighted = data.astype(np.uint64) * _powers(int(lengths.max()))[position]
            cumulative = np.concatenate(([np.uint64(0)], np.cumsum(weighted, dtype=np.uint64)))
            sums = cumulative[offsets[1:] - begin] - cumulative[starts]
        h = sums ^ (lengths.astype(np.uint64) * _MIX2)
        h ^= h >> np.uint64(30)
        h *= _MIX1
        h ^= h >> np.uint64(27)
        h *= _MIX2
        h ^= h >> np.uint64(31)
    return h


@dataclass(frozen=True)
class _Snapshot:
    keys: np.ndarray
    ids: np.ndarray
    num_chunks: int
    size: int
    counts: np.ndarray


class NameIndex:
    """Names of one entity type (or of the dynamic relations) -> ids 0..size-1, with counts."""

    def __init__(self) -> None:
        self._keys = np.empty(0, dtype=np.uint64)  # sorted hashes
        self._ids = np.empty(0, dtype=np.int64)  # id of each sorted hash
        self._chunks: list[pa.Array] = []  # names by id, chunk after chunk
        self._names_cache: pa.ChunkedArray | None = None
        self.size = 0
        self.counts = np.zeros(0, dtype=np.int64)

    def names(self) -> pa.ChunkedArray:
        """All names, by id."""
        if self._names_cache is None:
            self._names_cache = pa.chunked_array(self._chunks, type=pa.string())
        return self._names_cache

    def add_counts(self, ids: np.ndarray, counts: np.ndarray) -> None:
        """``counts[ids] += counts`` for distinct ``ids``."""
        self.counts[ids] += counts

    def lookup_or_add(self, parts: list[tuple[pa.Array, np.ndarray]]) -> list[np.ndarray]:
        """Ids of the names in each part, adding unseen names in order of first position.

        Args:
            parts: ``(names, first_pos)`` pairs; ``names`` are distinct within a part (a
                dictionary's values), ``first_pos[i]`` is where names[i] first occurs in the
                batch. Positions must be comparable across parts (they order new names).

        Returns:
            One int64 id array per part, aligned with its names.

        Raises:
            HashCollisionError: two different names hash alike.
        """
        names = [_as_string(p[0]) for p in parts]
        hashes = [hash_strings(n) for n in names]
        all_hash = np.concatenate(hashes)
        all_pos = np.concatenate([p[1] for p in parts]).astype(np.int64)
        ids = self._find(all_hash)
        found = np.flatnonzero(ids >= 0)
        all_names = pa.concat_arrays(names) if len(names) > 1 else names[0]
        if len(found):
            self._check_same(all_names.take(pa.array(found)), self.names().take(pa.array(ids[found])))
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            ids[missing] = self._add(all_hash[missing], all_pos[missing], all_names.take(pa.array(missing)))
        bounds = np.cumsum([0] + [len(h) for h in hashes])
        return [ids[bounds[i] : bounds[i + 1]] for i in range(len(parts))]

    def snapshot(self) -> _Snapshot:
        """State to :meth:`restore` (the counts are copied; everything else is replaced, not mutated)."""
        return _Snapshot(self._keys, self._ids, len(self._chunks), self.size, self.counts.copy())

    def restore(self, snap: _Snapshot) -> None:
        """Forget every name and count added since ``snap``."""
        self._keys, self._ids, self.size, self.counts = snap.keys, snap.ids, snap.size, snap.counts
        del self._chunks[snap.num_chunks :]
        self._names_cache = None

    def _find(self, hashes: np.ndarray) -> np.ndarray:
        """Id of each hash, -1 where unknown."""
        ids = np.full(len(hashes), -1, dtype=np.int64)
        if len(self._keys) == 0:
            return ids
        at = np.minimum(np.searchsorted(self._keys, hashes), len(self._keys) - 1)
        hit = self._keys[at] == hashes
        ids[hit] = self._ids[at[hit]]
        return ids

    def _add(self, hashes: np.ndarray, positions: np.ndarray, names: pa.Array) -> np.ndarray:
        """Give new ids to unseen names (possibly repeated across parts); their ids."""
        order = np.lexsort((positions, hashes))  # by hash, then first position
        sorted_hash = hashes[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = sorted_hash[1:] != sorted_hash[:-1]
        group = np.cumsum(first) - 1  # group of each sorted entry
        reps = order[first]  # representative (earliest) entry per distinct hash
        if not first.all():  # the same hash from two parts: must be the same name
            self._check_same(names.take(pa.array(order[~first])), names.take(pa.array(reps[group[~first]])))
        by_position = np.argsort(positions[reps], kind="stable")
        new_ids = np.empty(len(reps), dtype=np.int64)
        new_ids[by_position] = self.size + np.arange(len(reps))
        self._chunks.append(names.take(pa.array(reps[by_position])))
        self._names_cache = None
        self.size += len(reps)
        self.counts = np.concatenate([self.counts, np.zeros(len(reps), dtype=np.int64)])
        rep_hash = sorted_hash[first]  # sorted, distinct
        at = np.searchsorted(self._keys, rep_hash)
        self._keys = np.insert(self._keys, at, rep_hash)
        self._ids = np.insert(self._ids, at, new_ids)
        out = np.empty(len(hashes), dtype=np.int64)
        out[order] = new_ids[group]
        return out

    @staticmethod
    def _check_same(left: pa.Array, right: pa.Array) -> None:
        same = pc.equal(left, right)
        if not pc.all(same).as_py():
            bad = pc.index(same, False).as_py()
            raise HashCollisionError(
                f"names {left[bad].as_py()!r} and {right[bad].as_py()!r} have the same 64-bit hash; "
                "rename one of them (this is a one-in-10^8 event for a million names)"
            )


def _as_string(names: pa.Array) -> pa.Array:
    return names if names.type == pa.string() else names.cast(pa.string())


def first_positions(indices: np.ndarray, size: int, positions: np.ndarray) -> np.ndarray:
    """For each dictionary entry 0..size-1, the smallest ``positions[i]`` with ``indices[i] == entry``.

    ``positions`` must increase with i. Entries never referenced get ``int64 max``.
    """
    first = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
    # Fancy assignment keeps the last write for repeated targets: writing in reverse leaves the first.
    first[indices[::-1]] = positions[::-1]
    return first
