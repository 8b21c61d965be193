"""What moved under a checkpoint since it was trained: the names a refusal to resume counts.

A run resumes its own ``checkpoint_path`` by position, and ``pbg eval`` ranks its rows by position;
if the entity files were imported again since, its rows now stand for other entities. The
refusal names each entity type (and the dynamic relation types) whose names differ, with how many
of the checkpoint's names moved to another (partition, offset), how many are new and how many are gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import numpy as np

from pbg_core.ports import NamesDigests
from storage.checkpoint_names import NamesArchive, NamesCheck
from storage.entities import EntityStore
from storage.errors import DataNotFound
from storage.remap.matching import match, match_lists, name_table


def what_moved(
    archive: NamesArchive,
    recorded: NamesDigests,
    entities: EntityStore,
    check: NamesCheck,
    num_partitions: Mapping[str, int],
    skip_same: bool = False,
) -> list[str]:
    """One phrase per entity type (then the relation types) whose names differ, e.g.
    ``entity type 'user': 1,234 of 10,000 names moved, 40 new, 12 gone``.

    ``skip_same``: no phrase for a type whose lists are the same names in the same places under
    another digest (an object store's multi-part ETag, say): its rows are where its names are.
    """
    phrases = []
    for entity in check.changed:
        what = f"entity type {entity!r}"
        try:
            old = name_table(partial(_kept_names, archive, recorded, entity), num_partitions[entity])
        except DataNotFound:
            phrases.append(f"{what}: its names changed ({archive.url} lacks the old ones, so they cannot be counted)")
            continue
        new = name_table(partial(entities.load_names, entity), num_partitions[entity])
        if skip_same and old.counts == new.counts and old.names.equals(new.names):
            continue
        moves, counted = match(old, new)
        moved = int(np.count_nonzero((moves.old_part != moves.new_part) | (moves.old_offset != moves.new_offset)))
        phrases.append(f"{what}: {moved:,} of {len(old):,} names moved, {counted.new:,} new, {counted.dropped:,} gone")
    if check.relations_changed and recorded.relations is not None:
        try:
            old_relations = archive.load(recorded.relations)
        except DataNotFound:
            phrases.append(f"the relation types changed ({archive.url} lacks the old ones, so they cannot be counted)")
            return phrases
        new_relations = entities.load_dynamic_relation_names()
        if skip_same and new_relations == old_relations:
            return phrases
        index, counted = match_lists(old_relations, new_relations)
        kept = index >= 0
        moved = int(np.count_nonzero(index[kept] != np.flatnonzero(kept)))
        phrases.append(
            f"relation types: {moved:,} of {len(old_relations):,} moved, {counted.new:,} new, {counted.dropped:,} gone"
        )
    return phrases


def _kept_names(archive: NamesArchive, recorded: NamesDigests, entity: str, part: int) -> list[str]:
    """The names the checkpoint's rows of (entity, part) follow."""
    return archive.load(recorded.entities[(entity, part)])


__all__ = ["what_moved"]
