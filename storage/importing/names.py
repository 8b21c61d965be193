"""Name -> dense id dictionaries for the importer, vectorized (no Python object per name).

Per entity type (and for dynamic relations) a :class:`NameIndex` keeps:

- ``names``: the names by id, as pyarrow string chunks (about 11 bytes per short name);
- a :class:`~storage.importing.hash_table.HashTable` from each name's 64-bit ``key`` hash (or, when
  another name holds that key, its alternate key) to its id and 32 bits of its ``check`` hash
  (:func:`~storage.importing.hash_table.hash_strings`); both hashes and the table key by id (to rebuild
  the table on :meth:`NameIndex.restore`);
- ``counts``: occurrences per id.

Every hit is confirmed by comparing its ``check`` bits, so two names that share a ``key`` are
both kept, as separate ids. Two names are merged only if their key and 32 check bits all
collide (2**-96 per pair), and an import stops with :class:`HashCollisionError` (naming both)
only if two names collide on both full hashes.
Ids follow the order in which names are first seen, given by caller-supplied positions, so the
numbering does not depend on how the input was cut into batches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from storage.importing.hash_table import (
    STORED_CHECK_MASK,
    HashCollisionError,
    HashTable,
    alternate_key,
    hash_strings,
)

__all__ = ["HashCollisionError", "NameIndex", "first_positions"]

HashMap = Callable[[Callable[[pa.Array], tuple[np.ndarray, ...]], Iterable[pa.Array]], Iterable[tuple[np.ndarray, ...]]]


_IDENTITY = np.dtype((np.void, 16))  # a name's key and check hashes side by side


@dataclass(frozen=True)
class _Snapshot:
    size: int
    num_chunks: int
    counts: np.ndarray


class NameIndex:
    """Names of one entity type (or of the dynamic relations) -> ids 0..size-1, with counts.

    A name is known by its ``key`` and ``check`` hashes. It sits in the table under its key,
    or, when another name already holds that key (a 64-bit collision: about one in 10^8 for a
    million names, one in 40 for a billion), under its :func:`alternate_key`; a lookup whose
    key hit carries another check tries the alternate. Only a collision of both hashes of two
    names at once raises :class:`HashCollisionError`.

    Args:
        hash_map: How to hash and probe the parts of a lookup (``map``-like); a thread pool's
            ``map`` does them in parallel (numpy releases the GIL).
    """

    def __init__(self, hash_map: HashMap = map) -> None:
        self._hash_map = hash_map
        self._table = HashTable()
        self._keys = np.empty(0, dtype=np.uint64)  # key hash by id
        self._checks = np.empty(0, dtype=np.uint64)  # check hash by id
        self._slots = np.empty(0, dtype=np.uint64)  # table key by id: the key, or the alternate
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
            HashCollisionError: two different names share both hashes' table bits.
        """
        arrays = [_as_string(p[0]) for p in parts]
        names = pa.chunked_array(arrays, type=pa.string())  # rows below index the parts end to end
        probed = list(self._hash_map(self._probe, arrays))
        keys = np.concatenate([p[0] for p in probed])
        checks = np.concatenate([p[1] for p in probed])
        ids = np.concatenate([p[2] for p in probed])
        slots = keys.copy()
        bounds = np.cumsum([0] + [len(a) for a in arrays])
        taken = np.concatenate([bounds[i] + p[3] for i, p in enumerate(probed)])  # key held by another name
        if len(taken):
            ids[taken], slots[taken] = self._find_alternates(keys[taken], checks[taken], taken, names)
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            positions = np.concatenate([p[1] for p in parts]).astype(np.int64)
            ids[missing] = self._add(keys[missing], slots[missing], checks[missing], positions[missing], missing, names)
        return [ids[bounds[i] : bounds[i + 1]] for i in range(len(parts))]

    def shared_with(self, other: NameIndex, examples: int = 3) -> tuple[int, list[str]]:
        """(how many names are in both indexes, the first few of them by this index's ids)."""
        _, mine, _ = np.intersect1d(self._identities(), other._identities(), assume_unique=True, return_indices=True)
        same = np.sort(mine)
        shown = self.names().take(pa.array(same[:examples], type=pa.int64())).to_pylist() if len(same) else []
        return len(same), shown

    def snapshot(self) -> _Snapshot:
        """State to :meth:`restore`."""
        return _Snapshot(self.size, len(self._chunks), self.counts.copy())

    def restore(self, snap: _Snapshot) -> None:
        """Forget every name and count added since ``snap``."""
        self.size, self.counts = snap.size, snap.counts
        self._keys, self._checks, self._slots = (a[: snap.size] for a in (self._keys, self._checks, self._slots))
        del self._chunks[snap.num_chunks :]
        self._names_cache = None
        self._table = HashTable()
        self._table.insert(self._slots, np.arange(snap.size, dtype=np.int64), self._checks)

    def _identities(self) -> np.ndarray:
        """(key, check) of every id as one 16-byte value (sortable, comparable)."""
        return np.ascontiguousarray(np.stack([self._keys, self._checks], axis=1)).view(_IDENTITY).ravel()

    def _probe(self, names: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(key, check, id or -1, rows whose key is held by another name) of ``names``."""
        key, check = hash_strings(names)
        ids, stored_check = self._table.find(key)
        taken = np.flatnonzero((ids >= 0) & (stored_check != (check & STORED_CHECK_MASK)))
        ids[taken] = -1
        return key, check, ids, taken

    def _find_alternates(
        self, keys: np.ndarray, checks: np.ndarray, rows: np.ndarray, names: pa.ChunkedArray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(id or -1, table key) of names whose key another name holds: they live at their alternate."""
        alternates = alternate_key(keys, checks)
        ids, stored_check = self._table.find(alternates)
        clash = np.flatnonzero((ids >= 0) & (stored_check != (checks & STORED_CHECK_MASK)))
        if len(clash):
            _collision(names[int(rows[clash[0]])].as_py(), self.names()[int(ids[clash[0]])].as_py())
        return ids, alternates

    def _add(
        self,
        keys: np.ndarray,
        slots: np.ndarray,
        checks: np.ndarray,
        positions: np.ndarray,
        rows: np.ndarray,
        names: pa.ChunkedArray,
    ) -> np.ndarray:
        """Give new ids to unseen names (possibly repeated); their ids. ``rows`` index ``names``."""
        order = np.lexsort((positions, checks, keys))  # by name, then position: a group's first is its earliest
        first = np.ones(len(order), dtype=bool)
        first[1:] = (keys[order][1:] != keys[order][:-1]) | (checks[order][1:] != checks[order][:-1])
        group = np.cumsum(first) - 1  # group (distinct new name) of each sorted row
        by_position = np.argsort(positions[order[first]], kind="stable")
        reps = order[first][by_position]  # one row per new name, in id order
        rep_slots = self._settle(keys[reps], slots[reps], checks[reps], rows[reps], names)
        new_ids = self.size + np.arange(len(reps), dtype=np.int64)
        self._chunks.append(names.take(pa.array(rows[reps])).combine_chunks())
        self._names_cache = None
        self._keys = np.concatenate([self._keys, keys[reps]])
        self._checks = np.concatenate([self._checks, checks[reps]])
        self._slots = np.concatenate([self._slots, rep_slots])
        self._table.insert(rep_slots, new_ids, checks[reps])
        self.size += len(reps)
        self.counts = np.concatenate([self.counts, np.zeros(len(reps), dtype=np.int64)])
        id_of_group = np.empty(len(reps), dtype=np.int64)
        id_of_group[by_position] = new_ids
        out = np.empty(len(keys), dtype=np.int64)
        out[order] = id_of_group[group]
        return out

    def _settle(
        self, keys: np.ndarray, slots: np.ndarray, checks: np.ndarray, rows: np.ndarray, names: pa.ChunkedArray
    ) -> np.ndarray:
        """Table keys of new names (in id order): of two new names on one key, the later takes its alternate."""
        _, first, inverse = np.unique(slots, return_index=True, return_inverse=True)
        later = np.ones(len(slots), dtype=bool)
        later[first] = False
        if not later.any():
            return slots
        moved = np.flatnonzero(later)
        holder = first[inverse[moved]]  # the earlier new name on the same key
        alternates = alternate_key(keys[moved], checks[moved])
        repeated = np.ones(len(moved), dtype=bool)
        repeated[np.unique(alternates, return_index=True)[1]] = False
        in_use = (
            (slots[moved] != keys[moved])  # already on its alternate: both hashes collided
            | (self._table.find(alternates)[0] >= 0)
            | np.isin(alternates, slots)
            | repeated
        )
        if in_use.any():
            bad = int(np.flatnonzero(in_use)[0])
            row, alternate = int(rows[moved[bad]]), alternates[bad]
            candidates = np.concatenate(
                [rows[slots == alternate], rows[moved[alternates == alternate]], rows[holder[bad : bad + 1]]]
            )
            _collision(names[row].as_py(), self._holder_name(alternate, candidates[candidates != row], names))
        slots = slots.copy()
        slots[moved] = alternates
        return slots

    def _holder_name(self, key: np.uint64, new_rows: np.ndarray, names: pa.ChunkedArray) -> str:
        """The name in the way at table key ``key``: a known one, else the first of ``new_rows``."""
        known = int(self._table.find(np.array([key], dtype=np.uint64))[0][0])
        return str(self.names()[known].as_py() if known >= 0 else names[int(new_rows[0])].as_py())


def _collision(left: str, right: str) -> None:
    raise HashCollisionError(
        f"names {left!r} and {right!r} collide on both of their 64-bit hashes; rename one of them "
        "(it takes two independent 64-bit hashes colliding at once)"
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
