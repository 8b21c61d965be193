"""Appending imports (``pbg import --append``): new edges join an import, nothing already written moves.

The names already imported keep their (partition, offset): their ids come first in the pass-1
name indexes (:func:`seed_counter`), in partition and offset order, and
:func:`storage.importing.partition.extend` appends the new names at the partitions' ends,
smallest partitions first. Entity count and names files grow; the edge files already written
stay valid (their offsets still point at the same names) and the new edges go to the import's
``edge_paths``. In dynamic mode new relation names are appended after the old ones.

:func:`read_existing` reads the import being appended to and refuses one that does not fit
the config (an entity type added or missing, another partition count) before any input is
read. The names files are the record: a count file that disagrees with its names file (an
append killed between the two moves) is corrected by the next append.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pbg_core.errors import ConfigError
from storage.entities import EntityStore
from storage.errors import BadDataError, DataNotFound
from storage.fs import reads

_COUNT_RE = re.compile(r"^entity_count_(.+)_(\d+)\.txt$")


@dataclass(frozen=True)
class Existing:
    """An import as it stands: names per entity type and partition, relation names (dynamic mode)."""

    names: dict[str, list[list[str]]]  # entity type -> partition -> names by offset
    relation_names: list[str]  # dynamic mode: in id order; else []

    def sizes(self, entity: str) -> list[int]:
        """Names per partition of ``entity``."""
        return [len(part) for part in self.names[entity]]


def partition_counts_on_disk(entity_path: str, storage_options: Any = None) -> dict[str, int]:
    """Entity type -> partitions, from the count files in ``entity_path`` (types with a partition 0)."""
    found: dict[str, set[int]] = {}
    for name in reads.listdir(entity_path, storage_options):
        match = _COUNT_RE.match(name)
        if match:
            found.setdefault(match.group(1), set()).add(int(match.group(2)))
    return {entity: max(parts) + 1 for entity, parts in found.items() if 0 in parts}


def read_existing(config: Any) -> Existing:
    """The import in ``config.entity_path`` that an append extends.

    Raises:
        DataNotFound: there is no import there (nothing to append to).
        ConfigError: its entity types or partition counts differ from the config's, naming both.
    """
    options = config.storage_options_for_fs()
    on_disk = partition_counts_on_disk(config.entity_path, options)
    if not on_disk:
        raise DataNotFound(
            config.entity_path, "no import to append to (no entity_count_*_0.txt); import without --append first"
        )
    wanted = {name: entity.num_partitions for name, entity in config.entities.items()}
    problems = [
        f"entities.{name}: the import being appended to has {on_disk[name]} partition(s), the config says {parts}"
        for name, parts in sorted(wanted.items())
        if name in on_disk and on_disk[name] != parts
    ]
    if set(wanted) != set(on_disk):
        problems.append(
            f"entities: the import being appended to has entity types {sorted(on_disk)}, the config has {sorted(wanted)}"
        )
    if problems:
        raise ConfigError(problems)
    store = EntityStore(config.entity_path, options)
    names = {name: [store.load_names(name, part) for part in range(parts)] for name, parts in wanted.items()}
    for name, parts_names in names.items():
        flat = [n for part in parts_names for n in part]
        if len(set(flat)) != len(flat):
            raise BadDataError(
                config.entity_path, f"entity type {name!r}: a name is listed twice in its names files; import anew"
            )
    relation_names: list[str] = []
    if config.dynamic_relations:
        try:
            relation_names = store.load_dynamic_relation_names()
        except DataNotFound:
            relation_names = []
    return Existing(names, relation_names)


def seed_counter(counter: Any, existing: Existing, dynamic: bool) -> None:
    """Give the existing names the first ids of ``counter``'s indexes, in partition and offset order."""
    for entity, index in counter.entities.items():
        flat = [name for part in existing.names[entity] for name in part]
        _seed(index, flat)
    if dynamic:
        _seed(counter.relations, existing.relation_names)


def _seed(index: Any, names: list[str]) -> None:
    if not names:
        return
    # Ids 0..n-1 in this order; their counts start at 0 (only the new inputs are counted).
    index.lookup_or_add([(pa.array(names, type=pa.string()), np.arange(len(names), dtype=np.int64))])


__all__ = ["Existing", "partition_counts_on_disk", "read_existing", "seed_counter"]
