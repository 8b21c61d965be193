"""Name -> dense id dictionaries for the importer, vectorized (no Python object per name).

Per entity type (and for dynamic relations) a :class:`NameIndex` keeps:

- ``names``: the names by id, as pyarrow string chunks (about 11 bytes per short name);
- a :class:`~storage.import_hash.HashTable` from each name's 64-bit ``key`` hash to its id
  and 32 bits of its ``check`` hash (:func:`~storage.import_hash.hash_strings`), and both
  hashes by id (to rebuild the table on :meth:`NameIndex.restore`);
- ``counts``: occurrences per id.

Every hit is confirmed by comparing its ``check`` bits, so two different names are never
merged silently: a ``key`` collision raises :class:`HashCollisionError` naming both.
Ids follow the order in which names are first seen, given by caller-supplied positions, so the
numbering does not depend on how the input was cut into batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from storage.import_hash import STORED_CHECK_MASK, HashCollisionError, HashTable, hash_strings

__all__ = ["HashCollisionError", "NameIndex", "first_positions"]

HashMap = Callable[[Callable[[pa.Array], tuple[np.ndarray, ...]], Iterable[pa.Array]], Iterable[tuple[np.ndarray, ...]]]


@dataclass(frozen=True)
class _Snapshot:
    size: int
    num_chunks: int
    counts: np.ndarray


class NameIndex:
    """Names of one entity type (or of the dynamic relations) -> ids 0..size-1, with counts.

    Args:
        hash_map: How to hash and probe the parts of a lookup (``map``-like); a thread pool's
            ``map`` does them in parallel (numpy releases the GIL).
    """

    def __init__(self, hash_map: HashMap = map) -> None:
        self._hash_map = hash_map
        self._table = HashTable()
        self._keys = np.empty(0, dtype=np.uint64)  # key hash by id
        self._checks = np.empty(0, dtype=np.uint64)  # check hash by id
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

    def count(self, ids: np.ndarray) -> None:
        """One more occurrence of every entry of ``ids`` (repeats allowed)."""
        if len(ids):
            self.counts += np.bincount(ids, minlength=self.size)

    def lookup_or_add(self, parts: list[tuple[pa.Array, np.ndarray]]) -> list[np.ndarray]:
        """Ids of the names in each part, adding unseen names in order of first position.

        Args:
            parts: ``(names, positions)`` pairs; ``positions[i]`` is where ``names[i]`` occurs
                in the batch (names may repeat). Positions must be comparable across parts:
                the smallest position of a new name orders it among the new names.

        Returns:
            One int64 id array per part, aligned with its names.

        Raises:
            HashCollisionError: two different names hash alike.
        """
        names = [_as_string(p[0]) for p in parts]
        probed = list(self._hash_map(self._probe, names))
        keys = np.concatenate([p[0] for p in probed])
        checks = np.concatenate([p[1] for p in probed])
        ids = np.concatenate([p[2] for p in probed])
        mismatched = [i for i, p in enumerate(probed) if len(p[3])]  # parts with a check mismatch
        if mismatched:
            part = mismatched[0]
            row = int(probed[part][3][0])
            _collision(names[part][row].as_py(), self.names()[int(probed[part][2][row])].as_py())
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            positions = np.concatenate([p[1] for p in parts]).astype(np.int64)
            ids[missing] = self._add(keys[missing], checks[missing], positions[missing], missing, names)
        bounds = np.cumsum([0] + [len(n) for n in names])
        return [ids[bounds[i] : bounds[i + 1]] for i in range(len(parts))]

    def shared_with(self, other: NameIndex, examples: int = 3) -> tuple[int, list[str]]:
        """(how many names are in both indexes, the first few of them by this index's ids)."""
        _, mine, _ = np.intersect1d(self._keys, other._keys, assume_unique=True, return_indices=True)
        theirs, _ = other._table.find(self._keys[mine])
        same = np.sort(mine[self._checks[mine] == other._checks[theirs]])
        shown = self.names().take(pa.array(same[:examples], type=pa.int64())).to_pylist() if len(same) else []
        return len(same), shown

    def _probe(self, names: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(key, check, id or -1, rows whose check differs from the stored one) of ``names``."""
        key, check = hash_strings(names)
        ids, stored_check = self._table.find(key)
        return key, check, ids, np.flatnonzero((ids >= 0) & (stored_check != (check & STORED_CHECK_MASK)))

    def snapshot(self) -> _Snapshot:
        """State to :meth:`restore`."""
        return _Snapshot(self.size, len(self._chunks), self.counts.copy())

    def restore(self, snap: _Snapshot) -> None:
        """Forget every name and count added since ``snap``."""
        self.size, self.counts = snap.size, snap.counts
        self._keys, self._checks = self._keys[: snap.size], self._checks[: snap.size]
        del self._chunks[snap.num_chunks :]
        self._names_cache = None
        self._table = HashTable()
        self._table.insert(self._keys, np.arange(snap.size, dtype=np.int64), self._checks)

    def _add(self, keys: np.ndarray, checks: np.ndarray, positions: np.ndarray, rows: np.ndarray,
             names: list[pa.Array]) -> np.ndarray:
        """Give new ids to unseen names (possibly repeated); their ids. ``rows`` index the concatenated parts."""
        order = np.lexsort((positions, keys))  # by key, then position: the first of a group is the earliest
        sorted_keys = keys[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = sorted_keys[1:] != sorted_keys[:-1]
        group = np.cumsum(first) - 1
        reps = order[first]
        if not first.all():  # repeats of a key must repeat the name
            differ = np.flatnonzero(checks[order[~first]] != checks[reps[group[~first]]])
            if len(differ):
                chunked = pa.chunked_array(names, type=pa.string())
                other = order[~first][differ[0]]
                _collision(chunked[int(rows[other])].as_py(), chunked[int(rows[reps[group[~first]][differ[0]]])].as_py())
        by_position = np.argsort(positions[reps], kind="stable")
        new_ids = np.empty(len(reps), dtype=np.int64)
        new_ids[by_position] = self.size + np.arange(len(reps))
        chunked = pa.chunked_array(names, type=pa.string())
        self._chunks.append(chunked.take(pa.array(rows[reps[by_position]])).combine_chunks())
        self._names_cache = None
        rep_keys = sorted_keys[first][by_position]
        self._keys = np.concatenate([self._keys, rep_keys])
        self._checks = np.concatenate([self._checks, checks[reps[by_position]]])
        self._table.insert(rep_keys, self.size + np.arange(len(reps), dtype=np.int64), checks[reps[by_position]])
        self.size += len(reps)
        self.counts = np.concatenate([self.counts, np.zeros(len(reps), dtype=np.int64)])
        out = np.empty(len(keys), dtype=np.int64)
        out[order] = new_ids[group]
        return out


def _collision(left: str, right: str) -> None:
    raise HashCollisionError(
        f"names {left!r} and {right!r} have the same 64-bit hash; "
        "rename one of them (a one-in-10^8 event for a million names)"
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
