"""Scheduled retraining: each flow run trains into its own directory under the checkpoint root.

With ``retrain`` set, the config's ``checkpoint_path`` is a *root*: a flow run trains into
``{root}/run-{expected start, UTC}-{8 hex of its id}`` (:func:`run_key_for`), initialised from
the newest earlier run that committed a version, on the edge directories its ``edge_paths``
patterns match when it first starts. :func:`prepare_retrain` writes that choice into the run
directory's ``config.json`` at once, so a retry of the same flow run (same directory) reuses
it and its schedule never changes mid-run. :func:`finish_retrain` points ``{root}/latest.json``
at the run and deletes old runs (see :mod:`storage.run_dirs` for what is never deleted).

The run's config is the resolved one with three path fields replaced (``model_copy``), not parsed
again: ``checkpoint_path``, ``init_path`` and ``edge_paths`` are plain path values that no
rule of the schema relates to another field, so each is validated against its own field type
(:func:`_with_run_paths`) and the rest stays as validated; ``num_epochs`` becomes ``retrain.epochs``
(validated >= 1 by :class:`tasks.retrain_options.RetrainOptions`). Credentials stay ``SecretStr``
(copied, never dumped), and ``prepare_retrain``'s result is not persisted (a pickled config
would hold them in clear).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from prefect import task
from pydantic import TypeAdapter, ValidationError

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.errors import ConfigError, PbgError
from storage.checkpoints import CheckpointStore
from storage.holdout import HOLDOUT_SUFFIX
from storage.latest_run import promoted_run, read_latest, starting_run, write_latest
from storage.received import recorded_in_runs
from storage.retrain_state import RetrainState, read_state, remove_state, write_state
from storage.run_dirs import (
    expand_edge_paths,
    has_glob,
    read_run_dir,
    read_saved_config,
    run_dir_name,
    run_dir_url,
    run_name_in,
)
from storage.run_pruning import prune_run_dirs
from tasks._policies import NO_CACHE, STORAGE_RETRIES, STORAGE_RETRY_DELAYS, retry_if_transient, run_logger
from tasks.arrivals import Received, place, receive
from tasks.lease import hold_lease
from tasks.retrain_options import IncomingOptions, RetrainOptions
from tasks.retrain_start import base_generation, check_base, check_still_there
from tasks.runs import get_run

_STORAGE: dict[str, Any] = dict(
    cache_policy=NO_CACHE,
    retries=STORAGE_RETRIES,
    retry_delay_seconds=STORAGE_RETRY_DELAYS,
    retry_condition_fn=retry_if_transient,
)


def run_key_for(flow_run_id: str, expected_start: datetime) -> str:
    """The run directory name of a flow run: ``run-{YYYYmmddTHHMMSSZ}-{first 8 hex of the id}``.

    Args:
        flow_run_id: The flow run's id (``flow_run.id`` of Prefect's runtime context).
        expected_start: Its expected start time (timezone-aware); a retry keeps it, so it
            keeps the directory.

    Raises:
        ValueError: a naive datetime or an id without 8 leading hex digits.
    """
    return run_dir_name(flow_run_id, expected_start)


@task(name="acquire-retrain-lease", task_run_name="acquire the retraining root's lease", **_STORAGE)
def acquire_retrain_lease(config: ConfigSchema) -> str:
    """Take ``{checkpoint_path}/lease.json`` for the whole retraining run; its key for ``release_lease``.

    One retraining run per root at a time: a second one (a run started by hand beside a scheduled
    one), or ``pbg train`` with the root as its checkpoint, stops here naming the holder, before
    it imports or writes anything. Each run's own directory has its own lease besides.

    Raises:
        ValueError: the root is a glob pattern.
        storage.lease.LeaseHeldError: another live run holds the root.
    """
    root = config.checkpoint_path
    if has_glob(root):
        raise ValueError(f"checkpoint_path {root!r}: the root of the run directories cannot be a glob pattern")
    return hold_lease(root, config.storage_options_for_fs())


@task(name="receive-arrivals", task_run_name="import what arrived", persist_result=False, **_STORAGE)
def receive_arrivals(config: ConfigSchema, options: RetrainOptions, run_key: str) -> Received:
    """Import the files that arrived, split the new generations' holdouts (:func:`tasks.arrivals.receive`).

    On a retry of the same flow run the run directory's ``retrain.json`` holds what the first
    attempt received, and nothing is imported again. With new data, that file is written
    (gate ``pending``), with every file received so far (``received_files``).

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
        run_logger().info("retry: training what the first attempt received (generation %d)", state.generation)
        return Received([], state.generation, state.new_generations, state.holdouts, state.edge_paths)
    if state is not None:  # an attempt stopped after choosing its base: what was new then is new now
        base = state.base_generation
        check_base(config, base, f"{run_key} (this run, retried)", storage)
    else:
        base = base_generation(config, options.init_from_previous, run_key, storage)
    earlier = recorded_in_runs(config.checkpoint_path, storage)
    seed = config.seed if config.seed is not None else 0

    def choose_base() -> None:  # before the import: a retry after it must know what was new
        if state is None:
            write_state(url, RetrainState(generation=-1, base_generation=base, received=False), storage)

    arrivals = receive(config, incoming, base, seed, _import_options(incoming), earlier, choose_base)
    _log_arrivals(arrivals, incoming, base)
    if arrivals.nothing_new:
        remove_state(url, storage)  # a skipped run leaves nothing to start from or to keep
    else:
        fields = ("generation", "new_generations", "holdouts", "edge_paths", "received_files")
        chosen = {name: getattr(arrivals, name) for name in fields}
        write_state(url, RetrainState(**chosen, base_generation=base), storage)
    return arrivals


class NoNewData(PbgError):
    """``retrain.on_no_new_data: fail`` and nothing arrived since the run this one starts from."""


@task(name="no-new-data", task_run_name="nothing new: {options.on_no_new_data}", cache_policy=NO_CACHE)
def nothing_new(config: ConfigSchema, options: RetrainOptions) -> dict[str, Any]:
    """Nothing arrived: say so and skip training (the flow run completes), or fail (``on_no_new_data``).

    Returns:
        The flow's result for a skipped run: ``skipped`` (the message) and ``latest`` (what
        ``latest.json`` names, unchanged).

    Raises:
        NoNewData: with ``on_no_new_data: fail``, naming the pattern.
    """
    assert options.incoming is not None  # only runs with incoming files have "new data"
    message = (
        f"no new edge list under {options.incoming.inputs} and no imported generation newer than the "
        "latest promoted run's"
    )
    if options.on_no_new_data == "fail":
        raise NoNewData(f"{message} (retrain.on_no_new_data: fail)")
    latest = latest_run(config)
    run_logger().info("%s: training skipped (retrain.on_no_new_data: skip); latest.json names %s", message, latest)
    return {"skipped": message, "latest": latest}


def latest_run(config: ConfigSchema) -> str | None:
    """The run directory ``{checkpoint_path}/latest.json`` names (where it is now), or None."""
    latest = read_latest(config.checkpoint_path, config.storage_options_for_fs())
    return None if latest is None else run_dir_url(config.checkpoint_path, str(latest["run"]))


def _import_options(incoming: IncomingOptions) -> dict[str, Any]:
    """``import_edges`` keyword arguments of the incoming files."""
    names = ("lhs_col", "rhs_col", "rel_col", "weight_col", "delimiter", "entity_min_count")
    return {name: getattr(incoming, name) for name in (*names, "skip_bad_lines", "unknown_relations")}


def _log_arrivals(arrivals: Received, incoming: IncomingOptions, base: int | None) -> None:
    logger = run_logger()
    if arrivals.imported:
        logger.info("imported %d new file(s) as generation %d", len(arrivals.imported), arrivals.generation)
    else:
        logger.info("no new file under %s (files the import manifest lists are skipped)", incoming.inputs)
    since = "from scratch" if base is None else f"since generation {base}"
    logger.info("new generations %s: %s; holdouts %s", since, arrivals.new_generations, arrivals.holdouts)


@task(name="prepare-retrain", task_run_name="prepare {run_key}", persist_result=False, **_STORAGE)
def prepare_retrain(
    config: ConfigSchema, options: RetrainOptions, run_key: str, arrivals: Received | None = None
) -> ConfigSchema:
    """The run's own config: its directory, what it initialises from, its edge directories.

    On the run's first start: ``init_path`` = the newest earlier committed run (when
    ``init_from_previous``; else, or if none, the config's ``init_path``) and each
    ``edge_paths`` glob replaced by the directories it matches, sorted; the result is saved
    as the run directory's ``config.json`` (credentials masked). On a retry (that file
    exists) its ``edge_paths`` and ``init_path`` are reused.

    Args:
        config: The resolved config; its ``checkpoint_path`` is the root of the run directories.
        options: Retraining options (``epochs`` replaces the config's ``num_epochs``).
        run_key: This run's directory name (:func:`run_key_for`).
        arrivals: With ``incoming``: what :func:`receive_arrivals` found; the import's
            generations' edge paths are trained after the config's own.

    Raises:
        ValueError: ``run_key`` is not a run directory name.
        DataNotFound: an edge path pattern matches no directory; on a first start, ``latest.json``
            names a missing or incomplete run (before anything is written).
        ConfigError: the run directory's saved ``edge_paths`` or ``init_path`` have the wrong type.
    """
    logger = run_logger()
    root = config.checkpoint_path
    storage = config.storage_options_for_fs()
    if has_glob(root):
        raise ValueError(f"checkpoint_path {root!r}: the root of the run directories cannot be a glob pattern")
    url = run_dir_url(root, run_key)
    saved = read_saved_config(url, storage)
    if saved is not None:
        edge_paths, init_path = saved.get("edge_paths") or list(config.edge_paths), saved.get("init_path")
        logger.info(
            "run directory %s exists: resuming with its saved edge paths %s and init_path %s",
            url,
            edge_paths,
            init_path,
        )
    else:
        promoted_run(root, storage)  # a latest.json naming a lost model stops the run before config.json
        edge_paths = _union(expand_edge_paths(list(config.edge_paths), storage), arrivals)
        init_path = _choose_init(config, options, run_key, storage)
        logger.info("new run directory %s: edge paths %s, init_path %s", url, edge_paths, init_path)
    run_config = _with_run_paths(
        config, f"retrain run {run_key}", checkpoint_path=url, init_path=init_path, edge_paths=edge_paths
    )
    if options.epochs is not None:  # validated (>= 1) by RetrainOptions
        run_config = run_config.model_copy(update={"num_epochs": options.epochs})
    if saved is None:
        CheckpointStore(url, storage).save_config(config_to_json(run_config))  # freezes the choice; secrets masked
    return run_config


def _union(config_paths: list[str], arrivals: Received | None) -> list[str]:
    """The config's edge paths (but holdouts), then the import generations' not among them (same place, any spelling)."""
    held = [path for path in config_paths if path.rstrip("/").endswith(HOLDOUT_SUFFIX)]
    if held:
        run_logger().warning("edge_paths patterns match holdout directories, not trained: %s", held)
    paths = [path for path in config_paths if path not in held]
    seen = {place(path) for path in paths}
    for path in arrivals.edge_paths if arrivals is not None else []:
        if place(path) not in seen:
            seen.add(place(path))
            paths.append(path)
    return paths


def _with_run_paths(config: ConfigSchema, source: str, **paths: object) -> ConfigSchema:
    """``config`` with its path fields replaced, each value checked against its field's type.

    Raises:
        ConfigError: naming ``source``, the field, the bad value and the type allowed.
    """
    problems = []
    for name, value in paths.items():
        annotation = ConfigSchema.model_fields[name].annotation
        try:
            TypeAdapter(annotation).validate_python(value, strict=True)  # type: ignore[arg-type]  # every ConfigSchema field is annotated
        except ValidationError:
            problems.append(f"{name}: {value!r} is not a {annotation}")
    if problems:
        raise ConfigError(problems, source)
    return config.model_copy(update=paths)


def _choose_init(config: ConfigSchema, options: RetrainOptions, run_key: str, storage: dict[str, Any]) -> str | None:
    """The newest earlier committed run's directory, else the config's own ``init_path``."""
    if not options.init_from_previous:
        return config.init_path
    previous = starting_run(config.checkpoint_path, run_key, storage)
    if previous is None:
        run_logger().info("no earlier committed run under %s: init_path %s", config.checkpoint_path, config.init_path)
        return config.init_path
    run_logger().info("initialising from %s (version %d)", previous.url, previous.version)
    return previous.url


@task(name="finish-retrain", task_run_name="keep the last runs, point latest.json here", **_STORAGE)
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
            f"(run-YYYYmmddTHHMMSSZ-<8 hex>) directly under the root {root!r}"
        )
    run_dir = read_run_dir(root, name, storage)
    if run_dir.version > 0:
        latest = write_latest(root, run_dir, storage)
        if latest is not None:
            logger.info("latest.json now names %s (version %d)", run_dir.url, run_dir.version)
    else:
        logger.warning("run %s committed no version: latest.json unchanged", run_dir.url)
    removed = prune_run_dirs(root, name, options.keep_last, storage)
    logger.info(
        "kept the newest %d committed run(s) under %s; removed %d: %s", options.keep_last, root, len(removed), removed
    )
    return removed


__all__ = [
    "NoNewData",
    "Received",
    "RetrainOptions",
    "acquire_retrain_lease",
    "finish_retrain",
    "latest_run",
    "nothing_new",
    "prepare_retrain",
    "receive_arrivals",
    "run_key_for",
]
