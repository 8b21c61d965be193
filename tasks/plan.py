"""Plan a training run: check its inputs and count edge chunks (:func:`check_inputs`, before the
checkpoint's lease), then find where to resume (:func:`plan_training`, under the lease)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from pbg_core.config import ConfigSchema
from pbg_core.errors import ConfigError
from pbg_core.session.build import build_topology, version_layout
from pbg_core.session.iterations import Iteration, build_iterations, compute_num_edge_chunks
from pbg_core.types import Bucket
from storage.errors import BadDataError, DataNotFound
from storage.fs import reads
from storage.probe import check_reachable
from storage.resume_checks import check_fits, check_init_path, check_not_a_file
from storage.run_stores import RunStores
from tasks._policies import run_logger, storage_task
from tasks.runs import get_run


class TrainingPlan(BaseModel):
    """What a run will do: chunk count, committed version, iterations still to run."""

    num_edge_chunks: int = Field(ge=1)
    committed_version: int = Field(ge=0)
    total_iterations: int = Field(ge=0)
    buckets_per_iteration: int = Field(ge=1, description="Buckets of the partition grid (one pass).")
    remaining: list[Iteration]


@storage_task(name="check-inputs", task_run_name="check inputs")
def check_inputs(run: str) -> int:
    """Check what the run reads (stores reachable, every bucket file there and not all empty,
    ``init_path`` a checkpoint that fits the config); returns the edge-chunk count.

    Nothing here depends on the checkpoint being trained into, so the flow calls it before it
    takes the checkpoint's lease (a bad input fails before anything is written) and plans
    under the lease (:func:`plan_training`) with the count it returns.

    Args:
        run: The run's handle (:mod:`tasks.runs`): its config and stores.
    """
    return _check_inputs(run)


@storage_task(name="plan-training", task_run_name="plan training")
def plan_training(run: str, num_edge_chunks: int | None = None) -> TrainingPlan:
    """Read the committed version, check it is complete and fits the config, skip committed iterations.

    Args:
        run: The run's handle (:mod:`tasks.runs`): its config and stores.
        num_edge_chunks: What :func:`check_inputs` returned for this run; None checks the
            inputs first (what the flow does in two steps, around taking the lease).
    """
    logger = run_logger()
    config, stores = get_run(run).config, get_run(run).stores
    chunks = _check_inputs(run) if num_edge_chunks is None else num_edge_chunks
    iterations = build_iterations(config.num_epochs, config.edge_paths, chunks)
    committed = stores.checkpoint.read_version()
    stores.checkpoint.check_not_behind(committed, version_layout(config))  # files of versions it never wrote
    if committed > 0:  # a pointer ahead of its files stops the run here, before anything is removed
        # Every file there and readable; row counts are checked against the entity files only after
        # check-checkpoint-names (a re-import is named as such, not as a shape) and at session open.
        stores.checkpoint.check_complete(committed, version_layout(config))
    if committed > 0 and stores.checkpoint.has_model(committed):
        _check_schedule_unchanged(stores.checkpoint.load_metadata(committed).iteration, iterations[0], config)
    check_fits(stores.checkpoint, committed, config, logger, "checkpoint_path")
    if committed > len(iterations):
        logger.warning(
            "checkpoint version %d is beyond this config's %d iterations: nothing to train",
            committed,
            len(iterations),
        )
    logger.info("%d edge chunk(s); %d of %d iterations done", chunks, min(committed, len(iterations)), len(iterations))
    return TrainingPlan(
        num_edge_chunks=chunks,
        committed_version=committed,
        total_iterations=len(iterations),
        buckets_per_iteration=len(build_topology(config).buckets()),
        remaining=iterations[committed:],
    )


def _check_inputs(run: str) -> int:
    """:func:`check_inputs`' body (also run by :func:`plan_training` when given no count)."""
    config, stores = get_run(run).config, get_run(run).stores
    # A wrong endpoint or a store that is down fails here in about a second, not after
    # a minute of retries (every later step retries such faults).
    check_reachable(
        [config.entity_path, *config.edge_paths, config.checkpoint_path, *filter(None, [config.init_path])],
        config.storage_options_for_fs(),
    )
    topology = build_topology(config)
    check_not_a_file(stores.entities.url, stores.entities.storage_options, "entity_path")
    check_not_a_file(stores.checkpoint.url, stores.checkpoint.storage_options, "checkpoint_path")
    if stores.init is not None:
        check_not_a_file(stores.init.url, stores.init.storage_options, "init_path")
    _check_edge_paths_are_directories(stores)
    missing = [
        store.bucket_url(bucket)
        for store in stores.edges
        for bucket in topology.buckets()
        if not store.has_bucket(bucket)
    ]
    if missing:
        raise DataNotFound(
            config.edge_paths[0] if len(config.edge_paths) == 1 else "edge_paths",
            f"{len(missing)} edge bucket file(s) missing (expected a {topology.nparts_lhs}x{topology.nparts_rhs} "
            f"grid; run `pbg import` first): " + "; ".join(missing[:5]),
        )
    _check_not_empty(stores, topology.buckets())
    if stores.init is not None:
        check_init_path(stores.init)
        check_fits(stores.init, stores.init.read_version(), config, run_logger(), "init_path")
    return run_iterations(config, stores)[0]


def _check_edge_paths_are_directories(stores: RunStores) -> None:
    """An edge path names a directory of bucket files; a file there is a mistake worth naming."""
    for store in stores.edges:
        if reads.exists(store.url, store.storage_options) and not reads.isdir(store.url, store.storage_options):
            raise BadDataError(
                store.url,
                "edge path is a file, expected a directory of edges_<l>_<r>.h5 bucket "
                "files (`pbg import` makes one from an edge list)",
            )


def _check_not_empty(stores: RunStores, buckets: list[Bucket]) -> None:
    """Refuse edge paths whose every bucket is empty: training them would only report success.

    Stops at the first non-empty bucket of each path, so a normal path costs one read
    (the one :func:`run_iterations` makes anyway).
    """
    empty = [store.url for store in stores.edges if not any(store.num_edges(b) > 0 for b in buckets)]
    if empty:
        raise BadDataError(
            empty[0] if len(empty) == 1 else "edge_paths",
            f"all {len(buckets)} bucket file(s) have 0 edges in edge path(s) {', '.join(empty)}: nothing to train on "
            "(was every edge skipped at import? see `pbg import`'s report)",
        )


def run_iterations(config: ConfigSchema, stores: RunStores) -> tuple[int, list[Iteration]]:
    """The edge-chunk count and every iteration of the run (committed ones included)."""
    first = [store.num_edges(Bucket(0, 0)) for store in stores.edges]
    chunks = compute_num_edge_chunks(config.num_edge_chunks, first, config.max_edges_per_chunk)
    return chunks, build_iterations(config.num_epochs, config.edge_paths, chunks)


def _check_schedule_unchanged(stored: dict[str, int | str], planned: Iteration, config: ConfigSchema) -> None:
    """Refuse to resume when the edge paths or chunk count changed since the committed version.

    Progress is counted in iterations, so a different chunk or path count would silently
    remap it (PBG's behaviour); extending ``num_epochs`` is fine.
    """
    expected = {"num_edge_chunks": planned.num_edge_chunks, "num_edge_paths": planned.num_edge_paths}
    changed = [
        f"{key}: the checkpoint was trained with {stored[key]}, this config gives {value}"
        for key, value in expected.items()
        if key in stored and int(stored[key]) != value
    ]
    if changed:
        raise ConfigError(
            changed
            + [
                "resume with the original edge_paths / num_edge_chunks, or train into a new "
                "checkpoint_path with init_path set to this one"
            ],
            source=config.checkpoint_path,
        )
