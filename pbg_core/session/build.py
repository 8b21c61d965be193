"""Build a :class:`~pbg_core.session.engine.TrainingSession` from a config and opened stores.

This is the one place that turns the config into the session's collaborators
(topology, model, optimizers, embedding pool, residency, worker pool); the
collaborators themselves only receive flat values.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.errors import ShapeError
from pbg_core.model.embedder import build_model
from pbg_core.parallel.hogwild import HogwildWorkers
from pbg_core.parallel.memory import EmbeddingPool, SlotSpec
from pbg_core.parallel.worker_boot import default_num_workers, take_prestarted
from pbg_core.parallel.worker_jobs import WorkerInit, init_worker
from pbg_core.ports import CompleteVersion, NamesDigests, PartitionStore, VersionLayout
from pbg_core.seeding import fresh_seed
from pbg_core.session.engine import TrainingSession
from pbg_core.session.memory_plan import MemoryPlan, largest_chunk, plan_memory, run_sizes
from pbg_core.session.partition_io import PartitionIo
from pbg_core.session.partitions import PartitionTopology
from pbg_core.session.parts import MetadataSource, ModelState, SessionSettings, config_json_text
from pbg_core.session.residency import PartitionResidency
from pbg_core.session.save_points import SavePoints
from pbg_core.training.optimizers import AsyncAdagrad
from pbg_core.training.settings import BatchSettings, WorkerSettings
from pbg_core.types import EntityName, Partition, PartitionKey

logger = logging.getLogger(__name__)


def build_topology(config: ConfigSchema) -> PartitionTopology:
    """Partition topology of the config's entity types and relations."""
    return PartitionTopology.build(
        {name: entity.num_partitions for name, entity in config.entities.items()},
        [(relation.lhs, relation.rhs) for relation in config.relations],
        featurized=[name for name, entity in config.entities.items() if entity.featurized],
    )


def version_layout(
    config: ConfigSchema, load_count: Callable[[EntityName, Partition], int] | None = None
) -> VersionLayout:
    """What a complete checkpoint version of ``config`` holds: the embeddings of every (entity type,
    partition) of its topology, of ``load_count(type, part)`` rows and the type's dimension (any
    shape without ``load_count``), and the model."""
    topology = build_topology(config)
    keys = [*topology.partitioned_keys(), *topology.unpartitioned_keys()]
    if load_count is None:
        return VersionLayout(dict.fromkeys(keys))
    return VersionLayout.of({key: load_count(*key) for key in keys}, {e: config.entity_dimension(e) for e, _ in keys})


def worker_settings(config: ConfigSchema, sampled: bool = False) -> WorkerSettings:
    """What a HOGWILD worker reads of ``config``: loss, learning rates and batch settings.

    ``sampled``: offline evaluation ranks against distinct uniform candidates, masking the
    edge's own entity (``config`` is then :func:`pbg_core.evaluation.sampling.candidate_config`'s).
    """
    train = BatchSettings(
        batch_size=config.batch_size,
        num_batch_negs=config.num_batch_negs,
        num_uniform_negs=config.num_uniform_negs,
        disable_lhs_negs=config.disable_lhs_negs,
        disable_rhs_negs=config.disable_rhs_negs,
        max_norm=config.max_norm,
    )
    return WorkerSettings(
        loss_fn=config.loss_fn,
        margin=config.margin,
        lr=config.lr,
        relation_lr=config.relation_lr,
        train=train,
        holdout=train.for_holdout(config.eval_num_batch_negs, config.eval_num_uniform_negs),
        offline=replace(train, distinct_candidates=sampled),
    )


def _build_model_state(config: ConfigSchema, num_dynamic_relations: int, model_lr: float, seed: int) -> ModelState:
    model = build_model(config, num_dynamic_relations, seed)
    model.share_memory()
    params = list(model.parameters())
    optimizer = AsyncAdagrad(params, model_lr).share_memory_() if params else None
    return ModelState(model=model, optimizer=optimizer)


def _build_pool(
    config: ConfigSchema, topology: PartitionTopology, counts: dict[PartitionKey, int], resident: dict[str, int]
) -> EmbeddingPool:
    specs = {
        entity: SlotSpec(
            max_count=max(count for (name, _), count in counts.items() if name == entity),
            dim=config.entity_dimension(entity),
            num_slots=resident.get(entity, 1),
        )
        for entity in topology.num_partitions
    }
    return EmbeddingPool.allocate(specs)


def _log_opened(source: str, num_workers: int, topology: PartitionTopology, resident: dict[str, int]) -> None:
    held = "".join(
        f"; {count} of {topology.num_partitions[e]} {e} partitions in memory" for e, count in resident.items()
    )
    logger.info(
        "model from %s; %d workers; %d partitions per side (%d x %d buckets)%s",
        source,
        num_workers,
        max(topology.nparts_lhs, topology.nparts_rhs),
        topology.nparts_lhs,
        topology.nparts_rhs,
        held,
    )


def _memory_plan(
    config: ConfigSchema,
    topology: PartitionTopology,
    counts: dict[PartitionKey, int],
    num_dynamic: int,
    stores: Any,
    spare_slots: bool,
) -> MemoryPlan | None:
    """The run's memory plan, logged; None when the stores cannot say what memory is available.

    Without ``spare_slots`` (offline evaluation, a cluster's machine) nothing is in flight.

    Raises:
        MemoryPlanError: the partitions cannot fit (see :func:`~pbg_core.session.memory_plan.plan_memory`).
    """
    available = stores.memory_available() if hasattr(stores, "memory_available") else None
    if available is None:
        return None
    chunk = largest_chunk(stores.edges, topology.buckets(), config.num_edge_chunks, config.max_edges_per_chunk)
    plan = plan_memory(run_sizes(config, topology, counts, num_dynamic, chunk), available, config.resident_partitions)
    if not spare_slots:
        plan = replace(plan, in_flight=0)
    logger.info("%s", plan.describe())
    return plan


def _slots(
    config: ConfigSchema, topology: PartitionTopology, plan: MemoryPlan | None, spare_slots: bool
) -> tuple[dict[str, int], dict[str, int]]:
    """Partitions of each partitioned type kept resident, and the spare slots beside them.

    Resident: the plan's count (``resident_partitions``, or as many as fit), else the config's.
    Spare (``spare_slots``, where a type has partitions left out): the plan's in-flight slots, one
    read ahead while the other's partition is written behind (2 without a plan).
    """
    resident = topology.resident_slots(plan.resident if plan is not None else config.resident_partitions)
    if not spare_slots:
        return resident, {}
    flying = plan.in_flight if plan is not None else 2
    spare = {e: min(flying, topology.num_partitions[e] - k) for e, k in resident.items()}
    return resident, {e: n for e, n in spare.items() if n > 0}


def relation_sides(config: ConfigSchema, num_dynamic: int) -> tuple[tuple[str, str], ...]:
    """(lhs type, rhs type) per relation id; dynamic relations all share the template's."""
    if config.dynamic_relations:
        template = config.relations[0]
        return tuple((template.lhs, template.rhs) for _ in range(num_dynamic))
    return tuple((relation.lhs, relation.rhs) for relation in config.relations)


def check_checkpoint_fits(
    store: PartitionStore,
    version: int,
    counts: dict[PartitionKey, int],
    dims: dict[str, int],
    required: bool,
    may_grow: bool = False,
) -> None:
    """Refuse, before any training, a checkpoint whose embeddings do not fit this config.

    Args:
        store: The checkpoint (the run's own, or init_path's).
        version: Its committed version (nothing to check for 0).
        counts: Entity count per (entity, partition) from the entity files.
        dims: Embedding dimension per entity type.
        required: Every partition must be present (the run's own committed version).
        may_grow: A partition may hold fewer rows than it has now (``init_path`` of a graph grown
            by ``pbg import --append``: the new rows start fresh); never more.

    Raises:
        ShapeError: a partition's stored shape differs from (count, dimension), or one is missing.
    """
    if version == 0:
        return
    where = f"{getattr(store, 'url', 'checkpoint')} version {version}"
    problems = []
    for (entity, part), count in sorted(counts.items()):
        if not store.has_embeddings(entity, part, version):
            if required:
                problems.append(f"entity type {entity!r} partition {part}: no embeddings file")
            continue
        found = store.embeddings_shape(entity, part, version)
        grown = may_grow and found[1] == dims[entity] and found[0] < count
        if found != (count, dims[entity]) and not grown:
            problems.append(
                f"entity type {entity!r} partition {part}: stored shape {found}, this config "
                f"expects ({count}, {dims[entity]}) (entity count, dimension)"
            )
    if problems:
        raise ShapeError(
            f"{where} does not fit this config (another config, or entities imported again?): " + "; ".join(problems)
        )


def _build_residency(
    config: ConfigSchema,
    stores: Any,
    pool: EmbeddingPool,
    counts: dict[PartitionKey, int],
    start: tuple[int, PartitionStore | None, NamesDigests],
    seed: int,
    read_only: bool,
) -> PartitionResidency:
    """The owner of the resident partitions, saving to the checkpoint (and progress areas unless read-only).

    ``start``: the committed version, where init_path's rows are read, and the names the rows follow.
    """
    committed, init, names = start
    return PartitionResidency(
        pool=pool,
        store=stores.checkpoint,
        init_store=init,
        counts=counts,
        init_scale=config.init_scale,
        seed=seed,
        committed_version=committed,
        metadata=MetadataSource(config_json_text(config_to_json(config)), names),
        progress=None if read_only else getattr(stores, "progress", None),
        embedding_lr=config.lr,
        new_rows=getattr(stores, "new_rows", None) if config.init_new_entities == "neighbor_mean" else None,
    )


def _checked_starts(
    config: ConfigSchema, stores: Any, committed: int, counts: dict[PartitionKey, int]
) -> tuple[VersionLayout, CompleteVersion, NamesDigests, PartitionStore | None]:
    """What a complete version holds, evidence that the committed one is whole (every file, readable,
    of these shapes: nothing is deleted without it, see storage.version_check), the names the run's
    rows follow, and where ``init_path``'s rows are read, checked to fit (:func:`check_checkpoint_fits`).

    ``init_path`` is not read at all once a version is committed (that version holds what it gave);
    where its names moved since, its rows are read remapped by name (``stores.init_rows``).

    Raises:
        ShapeError: init_path does not fit the config.
        PbgError: init_path's rows belong to other names and no start remapped by name was prepared.
        IncompleteVersionError: the committed version lacks a file or holds an unreadable one.
    """
    dims = {entity: config.entity_dimension(entity) for entity, _ in counts}
    layout = VersionLayout.of(counts, dims)
    kept = stores.checkpoint.check_complete(committed, layout)
    dynamic = config.dynamic_relations
    keys = list(counts)
    names = stores.names_now(keys, dynamic) if hasattr(stores, "names_now") else NamesDigests()
    init = None
    if stores.init is not None and committed == 0:
        # Stores without a names record (tests' own) are read as they are.
        init = stores.init_rows(names, keys, dynamic) if hasattr(stores, "init_rows") else stores.init
    if init is not None:
        check_checkpoint_fits(init, init.read_version(), counts, dims, required=False, may_grow=True)
    return layout, kept, names, init


def _session_settings(config: ConfigSchema, topology: PartitionTopology, num_dynamic: int) -> SessionSettings:
    """The flat settings the session reads from the config."""
    return SessionSettings(
        topology=topology,
        bucket_order=config.bucket_order,
        eval_fraction=config.eval_fraction,
        checkpoint_preservation_interval=config.checkpoint_preservation_interval,
        relation_sides=relation_sides(config, num_dynamic),
        featurized=frozenset(name for name, entity in config.entities.items() if entity.featurized),
        batch_size=config.batch_size,
        progress_interval=config.progress_interval,
    )


def _start_workers(config: ConfigSchema, payload: WorkerInit) -> HogwildWorkers[Any]:
    """The HOGWILD workers, this process as worker 0 (see HogwildWorkers)."""
    num_workers = config.workers or default_num_workers()
    # Children are spawned, not forked from a forkserver: a forkserver preloaded with torch stays
    # alive the whole run and holds ~200 MiB; spawning costs ~1.5 s once per run instead, which
    # `pbg train` hides by starting them before the session exists (pbg_core.parallel.worker_boot).
    return HogwildWorkers(
        num_workers, init_worker, payload, start_method="spawn", prestarted=take_prestarted(num_workers - 1)
    )


def build_session(
    config: ConfigSchema,
    stores: Any,
    read_only: bool = False,
    sampled: bool = False,
    read_ahead: bool = True,
    version: int | None = None,
) -> TrainingSession:
    """Open a session: counts, model and optimizer state, pool, resident tables, workers.

    Args:
        config: The validated config.
        stores: Opened stores with ``entities``, ``edges`` (one per edge path),
            ``checkpoint``, ``init`` (or None) and ``stats`` (see storage.run_stores).
        read_only: For offline evaluation: nothing is ever written.
        sampled: Sampled offline evaluation: rank each side against distinct uniform candidates
            (``config`` is :func:`pbg_core.evaluation.sampling.candidate_config`'s).
        read_ahead: Spare slots and an I/O thread for partitions in flight (off on a cluster's machine).
        version: Read-only only: the version to load (checked complete; ``pbg eval --version``, a
            validation of a version written but not yet committed); None: the committed one.

    Returns:
        A session whose workers are started and whose unpartitioned tables are resident.
    """
    topology = build_topology(config)
    keys = [*topology.partitioned_keys(), *topology.unpartitioned_keys()]
    counts = {key: stores.entities.load_count(*key) for key in keys}
    num_dynamic = stores.entities.load_dynamic_relation_count() if config.dynamic_relations else 0
    if version is not None and not read_only:
        raise ValueError(f"only a read-only session may load another version than the committed one, got {version}")
    committed = stores.checkpoint.read_version() if version is None else version
    for_workers = worker_settings(config, sampled=sampled)
    seed = config.seed if config.seed is not None else fresh_seed()  # before the model: its operators' start
    model_state = _build_model_state(config, num_dynamic, for_workers.model_lr, seed)
    layout, kept, names, init = _checked_starts(config, stores, committed, counts)
    model_state.restore(stores.checkpoint, committed, init)
    spare_slots = read_ahead and not read_only
    plan = _memory_plan(config, topology, counts, num_dynamic, stores, spare_slots)
    resident, spare = _slots(config, topology, plan, spare_slots)
    pool = _build_pool(config, topology, counts, {e: k + spare.get(e, 0) for e, k in resident.items()})
    residency = _build_residency(config, stores, pool, counts, (committed, init, names), seed, read_only)
    residency.io_thread = PartitionIo() if spare else None
    residency.ensure_resident(topology.unpartitioned_keys())
    workers = _start_workers(config, WorkerInit(for_workers, model_state.model, model_state.optimizer, pool.buffers()))
    settings = replace(_session_settings(config, topology, num_dynamic), resident=resident)
    _log_opened(model_state.source, workers.num_workers, topology, resident)
    return TrainingSession(
        settings=settings,
        model_state=model_state,
        residency=residency,
        workers=workers,
        store=stores.checkpoint,
        edge_sources=list(stores.edges),
        stats_sink=stores.stats,
        seed=seed,
        layout=layout,
        kept=kept,
        progress_store=residency.progress,
        save_points=SavePoints(interval=settings.progress_interval),
    )
