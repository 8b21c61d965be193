"""Prepare a run's start from ``init_path`` by name: the ``init_by_name/`` directory, once per run.

Given how ``init_path``'s names record compares with the entity files
(:func:`storage.checkpoint_names.compare`), each entity type whose names differ is read on both
sides (``init_path``'s ``names/`` copies, the entity files now):

- the old names of every partition are the first names of the new one (``pbg import --append``):
  positions still hold, nothing is written (new rows start as ``init_new_entities`` says);
- otherwise its rows are moved by name (:mod:`storage.remap.rows`) into the start directory.

Dynamic relation types likewise (:mod:`storage.remap.relation_params`). The record goes last; a retry
of the same run with the same ``init_path`` and names finds it and reuses the files.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from pbg_core.model.param_names import model_public_names
from pbg_core.ports import NamesDigests
from pbg_core.types import PartitionKey
from storage import read_cache
from storage.checkpoint_names import NamesArchive, NamesChangedError, NamesCheck
from storage.checkpoints import CheckpointStore
from storage.config_loader import local_path
from storage.disk_space import check_disk_space
from storage.entities import EntityStore
from storage.errors import DataNotFound
from storage.remap.matching import Counted, is_prefix, match, match_lists, name_table
from storage.remap.relation_params import move_relations
from storage.remap.rows import Target, move_rows
from storage.remap.start import StartDir, start_metadata

HDF5_OVERHEAD = 64 << 10  # bytes per file beyond its data (as the checkpoint's disk checks count)


@dataclass(frozen=True)
class RunShape:
    """What the remap needs of the run's config.

    Attributes:
        num_partitions: Partitions per entity type.
        counts: Entities per (type, partition) now.
        dimensions: Embedding dimension per entity type.
        seed: The config's seed (None: each start draws one), recorded: a retry with the same seed
            reuses the prepared start.
        lr: The embedding learning rate (recorded with the row-Adagrad state).
        fresh_model: A fresh model's parameters for N relation types (dynamic relations), or None.
        start: ``start(type, partition, rows)`` fills ``rows`` (a whole partition) with a fresh model's start.
    """

    num_partitions: Mapping[str, int]
    counts: Mapping[PartitionKey, int]
    dimensions: Mapping[str, int]
    seed: int | None
    lr: float
    start: Callable[[str, int, torch.Tensor], None]
    fresh_model: Callable[[int], Mapping[str, torch.Tensor]] | None = None


@dataclass(frozen=True)
class Remapped:
    """What the preparation did: the entities and relation types kept, new and dropped."""

    entities: Counted
    relations: Counted | None
    remapped: tuple[str, ...]
    relations_remapped: bool
    reused: bool = False

    def line(self, new_rows: str) -> str:
        """One log line: ``remapped init_path by name: 9,812 of 10,000 entities kept their trained rows, ...``."""
        line = (
            f"remapped init_path by name: {self.entities.kept:,} of {self.entities.total:,} entities kept their "
            f"trained rows, {self.entities.new:,} new ({new_rows}), {self.entities.dropped:,} dropped"
        )
        if self.relations is not None:
            line += (
                f"; {self.relations.kept:,} of {self.relations.total:,} relation types kept their operator "
                f"parameters, {self.relations.new:,} new (fresh), {self.relations.dropped:,} dropped"
            )
        return line


def prepare_start(
    init: CheckpointStore,
    entities: EntityStore,
    start: StartDir,
    shape: RunShape,
    names: tuple[NamesDigests, NamesDigests, NamesCheck],
) -> Remapped:
    """Write (or reuse) ``start``: ``init``'s rows of every entity type whose names moved, by name.

    Args:
        init: ``init_path``.
        entities: The entity files the run reads.
        start: The run's start directory.
        shape: The run's partitions, counts, dimensions and fresh starts.
        names: ``init``'s names record, the entity files' digests now, and how they compare.

    Raises:
        NamesChangedError: ``init``'s record names a names list its ``names/`` does not hold.
    """
    recorded, current, check = names
    version = init.read_version()
    identity = start.identity(init, version, recorded, current)
    record = start.matches(identity)
    if record is not None and record.get("seed") == shape.seed:
        return _from_record(record)
    start.remove()
    counted, remapped, fresh = Counted(), [], {}
    for entity in sorted(shape.num_partitions):
        if entity not in check.changed:
            counted += Counted(kept=sum(shape.counts[(entity, p)] for p in range(shape.num_partitions[entity])))
            continue
        found, moved_rows = _entity_type(init, entities, start, shape, (entity, recorded, current))
        counted += found
        if moved_rows is not None:
            fresh.update({(entity, part): offsets for part, offsets in moved_rows.items()})
            remapped.append(entity)
    relations, moved = _relations(init, entities, start, shape, names)
    start.save_fresh(fresh)
    result = Remapped(counted, relations, tuple(remapped), moved)
    start.write_record({**identity, **_record_of(result), "seed": shape.seed})
    return result


def _entity_type(
    init: CheckpointStore,
    entities: EntityStore,
    start: StartDir,
    shape: RunShape,
    which: tuple[str, NamesDigests, NamesDigests],
) -> tuple[Counted, dict[int, torch.Tensor] | None]:
    """One entity type whose names changed: counted, and its rows moved into ``start`` unless its
    old names are the first ones of every partition now. Returns (counts, the fresh rows per
    partition, or None when nothing was written)."""
    entity, recorded, current = which
    parts = shape.num_partitions[entity]
    old = name_table(partial(_old_names, NamesArchive(init.url, init.storage_options), recorded, entity), parts)
    new = name_table(partial(entities.load_names, entity), parts)
    if is_prefix(old, new):
        return Counted(kept=len(old), new=len(new) - len(old)), None
    moves, found = match(old, new)
    del old, new  # only the moves are needed from here
    version = init.read_version()
    counts = tuple(shape.counts[(entity, p)] for p in range(parts))
    spill = _spill_dir(start)
    _check_room(start, spill, counts, shape.dimensions[entity], len(moves.old_part), entity)
    target = Target(
        store=start.store,
        version=version,
        counts=counts,
        dimension=shape.dimensions[entity],
        start=partial(shape.start, entity),
        lr=shape.lr,
        metadata=start_metadata(init, version, current),
    )
    fresh = move_rows(entity, moves, init, version, target, spill)
    shutil.rmtree(spill, ignore_errors=True)
    return found, fresh


def _relations(
    init: CheckpointStore,
    entities: EntityStore,
    start: StartDir,
    shape: RunShape,
    names: tuple[NamesDigests, NamesDigests, NamesCheck],
) -> tuple[Counted | None, bool]:
    """Dynamic relation types: counted, and their parameters moved by name unless the old names
    are the first ones now. Returns (counts or None without a change, whether the model was written)."""
    recorded, current, check = names
    if not check.relations_changed or recorded.relations is None or shape.fresh_model is None:
        return None, False
    old = _archived(NamesArchive(init.url, init.storage_options), recorded.relations, "the dynamic relation types")
    new = entities.load_dynamic_relation_names()
    if new[: len(old)] == old:
        return Counted(kept=len(old), new=len(new) - len(old)), False
    version = init.read_version()
    index, counted = match_lists(old, new)
    state_dict, optim = init.load_model(version)
    moved, moved_optim = move_relations(state_dict, optim, index, shape.fresh_model(len(new)))
    metadata = start_metadata(init, version, current)
    start.store.save_model(version, moved, model_public_names(moved), moved_optim, metadata)
    return counted, True


def _old_names(archive: NamesArchive, recorded: NamesDigests, entity: str, part: int) -> list[str]:
    """The names ``init_path``'s rows of (entity, part) follow, from its ``names/``."""
    return _archived(archive, recorded.entities[(entity, part)], f"entity type {entity!r} partition {part}")


def _archived(archive: NamesArchive, digest: str, what: str) -> list[str]:
    try:
        return archive.load(digest)
    except DataNotFound:
        raise NamesChangedError(
            f"init_path's rows of {what} follow the names in {archive.file_url(digest)}, which is missing "
            f"(copy a checkpoint directory with its {os.path.basename(archive.url)}/ directory): their entities "
            "cannot be matched by name"
        ) from None


def _spill_dir(start: StartDir) -> str:
    """A local directory for the rows in transit: inside the start directory on local disk, else
    under the read cache (one per checkpoint, so a later attempt finds and clears what a killed one left)."""
    local = local_path(start.url)
    if local is not None:
        return os.path.join(local, ".spill")
    return os.path.join(read_cache.cache_dir(), "remap-" + hashlib.sha256(start.url.encode()).hexdigest()[:16])


def _check_room(start: StartDir, spill: str, counts: tuple[int, ...], dimension: int, kept: int, entity: str) -> None:
    """Refuse before writing when the start files or the spill cannot fit (local disks only)."""
    files = sum(count * (dimension + 1) * 4 + HDF5_OVERHEAD for count in counts)
    pieces = kept * (dimension + 2) * 4 + len(counts) ** 2 * HDF5_OVERHEAD
    what = f"init_path's rows of entity type {entity!r} remapped by name"
    if local_path(start.url) is not None:
        check_disk_space(start.url, files + pieces, 0, what)
    else:
        check_disk_space(spill, pieces, 0, what)


def _record_of(result: Remapped) -> dict[str, Any]:
    """The record's account of ``result``."""
    counts = {"kept": result.entities.kept, "new": result.entities.new, "dropped": result.entities.dropped}
    relations = None
    if result.relations is not None:
        relations = {"kept": result.relations.kept, "new": result.relations.new, "dropped": result.relations.dropped}
    return {
        "remapped": list(result.remapped),
        "relations": result.relations_remapped,
        "entities": counts,
        "relation_types": relations,
    }


def _from_record(record: Mapping[str, Any]) -> Remapped:
    """What an earlier attempt's record says it did."""

    def counted(value: Any) -> Counted | None:
        return Counted(**{k: int(v) for k, v in value.items()}) if isinstance(value, dict) else None

    return Remapped(
        entities=counted(record.get("entities")) or Counted(),
        relations=counted(record.get("relation_types")),
        remapped=tuple(str(e) for e in record.get("remapped") or []),
        relations_remapped=bool(record.get("relations")),
        reused=True,
    )


__all__ = ["Remapped", "RunShape", "prepare_start"]
