"""The retraining tasks of the ``pbg-retrain`` flow (:mod:`flows.retrain`): the root's lease, what
arrived, the run's own config, nothing new, and the promotion.

The config's ``checkpoint_path`` is a *root*: a flow run trains into
``{root}/run-{expected start, UTC}-{8 hex of its id}`` (:func:`storage.layout.run_dir_name`),
initialised from the newest earlier run that committed a version, on the edge directories its
``edge_paths`` patterns match when it first starts. :func:`prepare_retrain` writes that choice
into the run directory's ``config.json`` at once (:mod:`storage.retraining.run_config`), so a retry
of the same flow run (same directory) reuses it. :func:`finish_retrain` points ``{root}/latest.json``
at the run, announces it (the Prefect event ``pbg.retrain.promoted``, which ``pbg-predict/predict``
triggers on) and deletes old runs (see :mod:`storage.retraining.pruning` for what is never deleted).

The logic is :mod:`storage.retraining`'s; these tasks add Prefect's retries and logs, and join it to
the importer (:func:`imported_data`, :func:`importer_for`), which the storage package keeps apart
(its importer never loads torch). ``prepare_retrain``'s result is not persisted (a pickled config
would hold credentials in clear).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from prefect.events import emit_event

from pbg_core.config import ConfigSchema
from storage import layout
from storage.errors import DataNotFound
from storage.fs import urls
from storage.importing.append import partition_counts_on_disk
from storage.importing.importer import import_edges
from storage.importing.manifest import generation_history, read_manifest
from storage.importing.options import ImportOptions
from storage.retraining.arrivals import Received, receive
from storage.retraining.gate import small_holdout
from storage.retraining.generations import Generation, ImportedData, ImportFiles
from storage.retraining.latest import promoted_run, read_latest, write_latest
from storage.retraining.options import IncomingOptions, RetrainOptions
from storage.retraining.pruning import prune_run_dirs
from storage.retraining.received import recorded_in_runs
from storage.retraining.run_config import check_root, run_config
from storage.retraining.run_dirs import read_run_dir, run_dir_url, run_name_in
from storage.retraining.start import base_generation, check_base, check_still_there
from storage.retraining.state import RetrainState, read_state, remove_state, write_state
from tasks._policies import plain_task, run_logger, storage_task, unpersisted_storage_task
from tasks.lease import hold_lease
from tasks.runs import get_run
from tasks.verdicts import verdict

if TYPE_CHECKING:
    from prefect.client.schemas.objects import State

PROMOTED_EVENT = "pbg.retrain.promoted"  # emitted once latest.json names a new run (announce_promotion)
ROOT_RESOURCE_PREFIX = "pbg.checkpoint-root."  # + the root as the config names it: the event's resource


@storage_task(name="acquire-retrain-lease", task_run_name="acquire the retraining root's lease")
def acquire_retrain_lease(config: ConfigSchema) -> str:
    """Take ``{checkpoint_path}/lease.json`` for the whole retraining run; its key for ``release_lease``.

    One retraining run per root at a time: a second one (a run started by hand beside a scheduled
    one), or ``pbg train`` with the root as its checkpoint, stops here naming the holder, before
    it imports or writes anything. Each run's own directory has its own lease besides.

    Raises:
        ValueError: the root is a glob pattern.
        storage.lease.LeaseHeldError: another live run holds the root.
    """
    check_root(config.checkpoint_path)
    return hold_lease(config.checkpoint_path, config.storage_options_for_fs())


@unpersisted_storage_task(name="receive-arrivals", task_run_name="import what arrived")
def receive_arrivals(config: ConfigSchema, options: RetrainOptions, run_key: str) -> Received:
    """Import the files that arrived, split the new generations' holdouts (:func:`storage.retraining.arrivals.receive`).

    On a retry of the same flow run the run directory's ``retrain.json`` holds what the first
    attempt received, and nothing is imported again. With new data, that file is written
    (gate ``pending``), with every file received so far (``received_files``). A gated run whose
    holdout is too small for its gate logs a warning (:func:`storage.retraining.gate.small_holdout`).

    Raises:
        DataNotFound: before anything is imported or written: ``latest.json`` names a missing or
            incomplete run, the run this one starts from trained a generation the import manifest
            no longer has, or a holdout of the new data is gone.
        ConfigError, BadDataError, DataNotFound: a bad file or an import that does not fit
            (nothing is imported then).
    """
    incoming = options.incoming
    assert incoming is not None  # the flow calls this only with retrain.incoming
    storage = config.storage_options_for_fs()
    url = run_dir_url(config.checkpoint_path, run_key)
    promoted_run(config.checkpoint_path, storage)  # a latest.json naming a lost model stops the run here
    state = read_state(url, storage)
    if state is not None and state.received:
        check_still_there(state.holdouts, storage)
        run_logger().info("retry: training what the first attempt received (generation %s)", state.generation)
        return Received([], state.generation, state.new_generations, state.holdouts, state.edge_paths)
    imported = imported_data(config)
    if state is not None:  # an attempt stopped after choosing its base: what was new then is new now
        base = state.base_generation
        check_base(config.checkpoint_path, imported, base, f"{run_key} (this run, retried)")
    else:
        base = base_generation(config.checkpoint_path, imported, options.init_from_previous, run_key, storage)
    earlier = recorded_in_runs(config.checkpoint_path, storage)
    seed = config.seed if config.seed is not None else 0

    def choose_base() -> None:  # before the import: a retry after it must know what was new
        if state is None:
            write_state(url, RetrainState(generation=None, base_generation=base, received=False), storage)

    importer = importer_for(config, incoming, seed)
    arrivals = receive(incoming, imported, importer, base, seed, storage, earlier, choose_base)
    _log_arrivals(arrivals, incoming, base)
    too_small = small_holdout(arrivals.held or 0, options) if arrivals.new_generations else None
    if too_small is not None:
        run_logger().warning("%s", too_small)
    if arrivals.nothing_new:
        remove_state(url, storage)  # a skipped run leaves nothing to start from or to keep
    else:
        fields = ("generation", "new_generations", "holdouts", "edge_paths", "received_files")
        chosen = {name: getattr(arrivals, name) for name in fields}
        write_state(url, RetrainState(**chosen, base_generation=base, holdout_warning=too_small or ""), storage)
    return arrivals


def imported_data(config: ConfigSchema) -> ImportedData:
    """What the config's ``entity_path`` holds: the import manifest's generations, typed."""
    storage = config.storage_options_for_fs()
    manifest = read_manifest(config.entity_path, storage)
    generations = tuple(map(Generation.from_entry, generation_history(manifest))) if manifest is not None else ()
    return ImportedData(
        generations,
        _holds_import(config.entity_path, storage),
        config.entity_path,
        urls.join_url(config.entity_path, layout.IMPORT_MANIFEST_FILE),
    )


def importer_for(config: ConfigSchema, incoming: IncomingOptions, seed: int) -> ImportFiles:
    """``pbg import`` (``--append``) of the files that arrived, with ``incoming``'s columns and policies."""
    options = ImportOptions(**incoming.edge_columns().model_dump())

    def import_files(files: list[str], edge_paths: list[str], append: bool) -> ImportedData:
        target = config.model_copy(update={"edge_paths": edge_paths})
        import_edges(target, files, options.model_copy(update={"append": append}), seed=seed)
        return imported_data(config)

    return import_files


def _holds_import(entity_path: str, storage: dict[str, Any]) -> bool:
    """Whether ``entity_path`` holds an import (perhaps PBG's, without a manifest)."""
    try:
        return bool(partition_counts_on_disk(entity_path, storage))
    except DataNotFound:
        return False


@plain_task(name="no-new-data", task_run_name="nothing new: {options.on_no_new_data}")
def nothing_new(config: ConfigSchema, options: RetrainOptions) -> dict[str, Any] | State:
    """Nothing arrived: say so and skip training (the flow run completes), or fail (``on_no_new_data``).

    Returns:
        The flow's result for a skipped run: ``skipped`` (the message) and ``latest`` (what
        ``latest.json`` names, unchanged); with ``on_no_new_data: fail``, a verdict
        (:func:`tasks.verdicts.verdict`): the task run ends Failed with the message, naming the pattern.
    """
    assert options.incoming is not None  # only runs with incoming files have "new data"
    message = (
        f"no new edge list under {options.incoming.inputs} and no imported generation newer than the "
        "latest promoted run's"
    )
    if options.on_no_new_data == "fail":
        run_logger().warning("%s: training skipped (retrain.on_no_new_data: fail)", message)
        return verdict(f"{message} (retrain.on_no_new_data: fail)")
    latest = latest_run(config)
    run_logger().info("%s: training skipped (retrain.on_no_new_data: skip); latest.json names %s", message, latest)
    return {"skipped": message, "latest": latest}


def latest_run(config: ConfigSchema) -> str | None:
    """The run directory ``{checkpoint_path}/latest.json`` names (where it is now), or None."""
    latest = read_latest(config.checkpoint_path, config.storage_options_for_fs())
    return None if latest is None else run_dir_url(config.checkpoint_path, str(latest["run"]))


def _log_arrivals(arrivals: Received, incoming: IncomingOptions, base: int | None) -> None:
    logger = run_logger()
    if arrivals.imported:
        logger.info("imported %d new file(s) as generation %d", len(arrivals.imported), arrivals.generation)
    else:
        logger.info("no new file under %s (files the import manifest lists are skipped)", incoming.inputs)
    since = "from scratch" if base is None else f"since generation {base}"
    generations = ", ".join(str(generation) for generation in arrivals.new_generations) or "none"
    holdouts = ", ".join(path.rstrip("/").rsplit("/", 1)[-1] for path in arrivals.holdouts) or "none"
    logger.info("new generations %s: %s; held out for the gate: %s", since, generations, holdouts)


@unpersisted_storage_task(name="prepare-retrain", task_run_name="prepare {run_key}")
def prepare_retrain(
    config: ConfigSchema, options: RetrainOptions, run_key: str, arrivals: Received | None = None
) -> ConfigSchema:
    """The run's own config: its directory, what it initialises from, its edge directories
    (:func:`storage.retraining.run_config.run_config`: saved on the first start, reused by a retry).

    Args:
        config: The resolved config; its ``checkpoint_path`` is the root of the run directories.
        options: Retraining options (``epochs`` replaces the config's ``num_epochs``).
        run_key: This run's directory name (:func:`storage.layout.run_dir_name`).
        arrivals: With ``incoming``: what :func:`receive_arrivals` found; the import's
            generations' edge paths are trained after the config's own.

    Raises:
        ValueError: ``run_key`` is not a run directory name.
        DataNotFound: an edge path pattern matches no directory; on a first start, ``latest.json``
            names a missing or incomplete run (before anything is written).
        ConfigError: the run directory's saved ``edge_paths`` or ``init_path`` have the wrong type.
    """
    return run_config(config, options, run_key, arrivals)


@storage_task(name="finish-retrain", task_run_name="keep the last runs, point latest.json here")
def finish_retrain(run: str, root: str, options: RetrainOptions) -> list[str]:
    """Point ``{root}/latest.json`` at the completed run, then delete runs beyond ``keep_last``.

    A run that committed nothing (``num_epochs=0``) leaves ``latest.json`` as it was.

    Args:
        run: The run's handle (:mod:`tasks.runs`); its config is :func:`prepare_retrain`'s.
        root: The resolved config's ``checkpoint_path``: the root of the run directories.
        options: Retraining options.

    Returns:
        URLs of the run directories deleted.

    Raises:
        ValueError: the run's checkpoint is not a run directory directly under the root.
    """
    logger = run_logger()
    checkpoint = get_run(run).stores.checkpoint
    storage = checkpoint.storage_options
    name = run_name_in(root, checkpoint.url)
    if name is None:
        raise ValueError(
            f"run checkpoint_path {checkpoint.url!r} is not a run directory "
            f"({layout.RUN_DIR_FORM}) directly under the root {root!r}"
        )
    run_dir = read_run_dir(root, name, storage)
    if run_dir.version > 0:
        latest = write_latest(root, run_dir, storage)
        if latest is not None:
            logger.info("latest.json now names %s (version %d)", run_dir.url, run_dir.version)
            announce_promotion(root, run_dir.url, run_dir.version)
    else:
        logger.warning("run %s committed no version: latest.json unchanged", run_dir.url)
    removed = prune_run_dirs(root, name, options.keep_last, storage)
    logger.info(
        "kept the newest %d committed run(s) under %s; removed %d: %s", options.keep_last, root, len(removed), removed
    )
    return removed


def announce_promotion(root: str, run_dir: str, version: int) -> None:
    """Emit :data:`PROMOTED_EVENT` about the root ``pbg.checkpoint-root.<root>`` (as the config names it),
    payload ``root``, ``run_dir`` and ``version``: what deployments trigger on (``pbg-predict/predict``).

    Sent once ``latest.json`` names the run; outside a flow run, or without a Prefect API, nothing is
    sent. Never fails the promotion: Prefect logs an event it could not send. The event's id is
    derived from the run and version, so a retried promotion sends the same event again, which
    Prefect's triggers act on once.
    """
    resource = {"prefect.resource.id": f"{ROOT_RESOURCE_PREFIX}{root}", "prefect.resource.name": root}
    payload = {"root": root, "run_dir": run_dir, "version": version}
    emit_event(
        PROMOTED_EVENT, resource=resource, payload=payload, id=uuid.uuid5(uuid.NAMESPACE_URL, f"{run_dir}#{version}")
    )
    run_logger().info("announced %s of %s version %d", PROMOTED_EVENT, run_dir, version)


__all__ = [
    "PROMOTED_EVENT",
    "ROOT_RESOURCE_PREFIX",
    "acquire_retrain_lease",
    "announce_promotion",
    "finish_retrain",
    "imported_data",
    "importer_for",
    "latest_run",
    "nothing_new",
    "prepare_retrain",
    "receive_arrivals",
]
