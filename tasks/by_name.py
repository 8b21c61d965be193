"""The names a run's rows belong to: checked before resuming, recorded, and ``init_path`` matched by name.

Every checkpoint file records which names list its rows follow (:mod:`storage.checkpoint_names`).

- ``check-checkpoint-names`` (under the lease, before anything is written or removed): a committed
  version whose names are not the entity files' now (a plain re-import reshuffled them) is not
  resumed: its rows would be trained as other entities'. The error names each entity type and
  how many names moved, are new and are gone, and the way on: a new ``checkpoint_path`` with
  ``init_path`` set to this one. A version without a record (PBG's) is resumed by position,
  with one warning.
- ``start-by-name`` (before the session opens, when there is something to train): the names
  files the run reads are copied into the checkpoint's ``names/`` (only those not there yet;
  while nothing is committed, others left by an earlier attempt are removed, and so is the
  bucket progress of an interrupted first pass whose saves follow other names, with one
  warning). With ``init_path`` and nothing committed, its record is compared with the entity
  files: the same names (equal digests) need nothing; no record: used by position, one
  warning; otherwise its rows are remapped by name into ``init_by_name/`` (:mod:`storage.remap`),
  counted in one line.
- ``remove-start-by-name`` (after training): the remapped start is not read once a version is
  committed.
- :func:`check_ranked_names` (``pbg eval``, the retraining gate's holdout evaluation, before any
  partition is read): a version whose names moved is not ranked by position either
  (:func:`storage.reader_names.check_positions`); one without a record is, with one warning.
"""

from __future__ import annotations

from typing import Any

import torch

from pbg_core.config import ConfigSchema
from pbg_core.model.embedder import build_model
from pbg_core.ports import NamesDigests, VersionLayout
from pbg_core.seeding import fresh_seed
from pbg_core.session.build import build_topology
from pbg_core.session.partition_reads import random_start
from pbg_core.types import PartitionKey
from storage.checkpoint_names import (
    NamesArchive,
    NamesChangedError,
    NamesCheck,
    compare,
    names_url,
    recorded_digests,
)
from storage.fs import urls
from storage.layout import DYNAMIC_REL_NAMES_FILE
from storage.reader_names import check_positions, progress_moved
from storage.remap.moved import what_moved
from storage.remap.prepare import RunShape, prepare_start
from storage.remap.start import StartDir
from storage.run_stores import RunStores
from tasks._policies import run_logger, storage_task
from tasks.runs import get_run


def run_keys(config: ConfigSchema) -> list[PartitionKey]:
    """Every (entity type, partition) of the run."""
    topology = build_topology(config)
    return [*topology.partitioned_keys(), *topology.unpartitioned_keys()]


@storage_task(name="check-checkpoint-names", task_run_name="check the checkpoint's entity names")
def check_checkpoint_names(run: str, committed_version: int) -> dict[str, Any]:
    """Refuse to resume a committed version whose rows now belong to other names (see the module docstring).

    Raises:
        NamesChangedError: naming each entity type (or the relation types) whose names moved.
    """
    config, stores = get_run(run).config, get_run(run).stores
    if committed_version == 0:
        return {"checked": False}
    keys, dynamic = run_keys(config), config.dynamic_relations
    checkpoint = stores.checkpoint
    recorded = recorded_digests(checkpoint.url, committed_version, keys, dynamic, checkpoint.storage_options)
    check = compare(recorded, stores.names_now(keys, dynamic), keys, dynamic)
    _warn_unchecked(check, f"checkpoint_path {checkpoint.url} version {committed_version}")
    if check.same:
        return {"checked": True}
    archive = NamesArchive(checkpoint.url, checkpoint.storage_options)
    parts = {name: entity.num_partitions for name, entity in config.entities.items()}
    moved = what_moved(archive, recorded, stores.entities, check, parts)
    raise NamesChangedError(
        f"checkpoint_path {checkpoint.url} version {committed_version} was trained on other names than "
        f"{config.entity_path} lists now (imported again since?): {'; '.join(moved)}. Resuming would train each "
        f"moved row as another entity's: train into a new checkpoint_path with init_path={checkpoint.url} "
        "(its rows are then matched by name)"
    )


@storage_task(name="start-by-name", task_run_name="record entity names, match init_path by name")
def start_by_name(run: str, committed_version: int) -> dict[str, Any]:
    """Record the names the run trains; with ``init_path`` and nothing committed, match its rows by name.

    Returns:
        ``{"names_copied": n}`` plus, after a remap, ``kept`` / ``new`` / ``dropped`` entities.
    """
    logger = run_logger()
    config, stores = get_run(run).config, get_run(run).stores
    keys, dynamic = run_keys(config), config.dynamic_relations
    current = stores.names_now(keys, dynamic)
    if committed_version == 0:
        _discard_moved_progress(stores, current)  # before the names it followed are pruned
    copied = _record_names(stores, current, prune=committed_version == 0)
    start = StartDir(stores.checkpoint.url, stores.checkpoint.storage_options)
    if committed_version > 0 or stores.init is None:
        start.remove()  # only read while nothing is committed
        return {"names_copied": copied}
    init_version = stores.init.read_version()
    recorded = recorded_digests(stores.init.url, init_version, keys, dynamic, stores.init.storage_options)
    check = compare(recorded, current, keys, dynamic)
    _warn_unchecked(check, f"init_path {stores.init.url} version {init_version}")
    if check.same:
        start.remove()
        return {"names_copied": copied}
    done = prepare_start(stores.init, stores.entities, start, _run_shape(config, stores), (recorded, current, check))
    if done.remapped or done.relations_remapped:
        logger.info(
            "%s%s", done.line(config.init_new_entities), " (prepared by an earlier attempt)" if done.reused else ""
        )
    return {"names_copied": copied, **vars(done.entities)}


@storage_task(name="remove-start-by-name", task_run_name="remove init_path's rows remapped by name")
def remove_start_by_name(run: str) -> None:
    """Delete ``init_by_name/`` once a version is committed (nothing reads it then; idempotent)."""
    stores = get_run(run).stores
    if stores.init is not None and stores.checkpoint.read_version() > 0:
        StartDir(stores.checkpoint.url, stores.checkpoint.storage_options).remove()


def check_ranked_names(config: ConfigSchema, stores: RunStores, version: int, reader: str) -> None:
    """Refuse to rank the edges of the current import against ``version`` of the run's checkpoint
    when the rows of an entity type the relations use (or the dynamic relation types) belong to
    other names now; cheap when they do not (digests only).

    ``reader``: what would rank them (``pbg eval``), for the message.

    Raises:
        NamesChangedError: naming each entity type whose names moved, how many, and what to do.
    """
    ranked = {relation.lhs for relation in config.relations} | {relation.rhs for relation in config.relations}
    parts = {name: entity.num_partitions for name, entity in config.entities.items() if name in ranked}
    checkpoint = stores.checkpoint
    check = check_positions(checkpoint, version, stores.entities, parts, config.dynamic_relations, reader)
    _warn_unchecked(check, f"checkpoint_path {checkpoint.url} version {version}")


def _discard_moved_progress(stores: RunStores, current: NamesDigests) -> None:
    """Discard the bucket saves of an interrupted first pass whose names moved since (imported again):
    resumed, they would be trained as other entities' rows. Nothing is committed: the pass starts afresh."""
    progress = stores.progress
    try:
        saved = progress.read(1)
        moved = progress_moved(stores.checkpoint, saved, current) if saved is not None else []
        if saved is not None and moved:
            run_logger().warning(
                "discarding the recorded progress of version 1 (%d of %d buckets, nothing committed): %s follow "
                "other names than %s lists now (imported again since?); the pass starts afresh",
                saved.done,
                len(saved.order),
                ", ".join(moved),
                stores.entities.url,
            )
            # Nothing is committed: version 0 is complete by definition, the only evidence clear() needs.
            progress.clear(stores.checkpoint.check_complete(0, VersionLayout({})))
    finally:
        progress.close()


def _record_names(stores: RunStores, current: NamesDigests, prune: bool) -> int:
    """Copy the names files the run reads into its checkpoint's ``names/``; returns how many were copied.

    ``prune`` (nothing committed): the others there are an earlier attempt's, from before a
    re-import, and no version follows them: removed. Once a version is committed they stay.
    """
    archive = NamesArchive(stores.checkpoint.url, stores.checkpoint.storage_options)
    sources = {digest: names_url(stores.entities, *key) for key, digest in current.entities.items()}
    if current.relations is not None:
        sources[current.relations] = urls.join_url(stores.entities.url, DYNAMIC_REL_NAMES_FILE)
    copied = archive.keep(sources)
    if prune:
        archive.remove_except(set(sources))
    return copied


def _warn_unchecked(check: NamesCheck, where: str) -> None:
    """One warning line for what has no names record (or no names file now): used by position."""
    if check.unchecked:
        run_logger().warning(
            "%s has no record of the names its rows belong to for %s (written by PBG, or before pbg-flow recorded "
            "them; or no entity_names file now): names could not be checked, rows are used by position",
            where,
            ", ".join(check.unchecked),
        )


def _run_shape(config: ConfigSchema, stores: RunStores) -> RunShape:
    """What the remap needs of the run's config and entity files."""
    seed = config.seed if config.seed is not None else fresh_seed()

    def start(entity: str, part: int, rows: torch.Tensor) -> None:
        random_start(rows, seed, entity, part, config.init_scale)  # as the session starts a fresh partition

    def fresh_model(num_relations: int) -> dict[str, torch.Tensor]:
        return dict(build_model(config, num_relations, seed).state_dict())  # new relation types start as a fresh run's

    return RunShape(
        num_partitions={name: entity.num_partitions for name, entity in config.entities.items()},
        counts={key: stores.entities.load_count(*key) for key in run_keys(config)},
        dimensions={name: config.entity_dimension(name) for name in config.entities},
        seed=config.seed,
        lr=config.lr,
        start=start,
        fresh_model=fresh_model if config.dynamic_relations else None,
    )


__all__ = ["check_checkpoint_names", "check_ranked_names", "remove_start_by_name", "run_keys", "start_by_name"]
