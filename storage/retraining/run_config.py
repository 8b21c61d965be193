"""A retraining run's own config: its directory, what it initialises from, its edge directories.

The run's config is the resolved one with three path fields replaced (``model_copy``), not parsed
again: ``checkpoint_path``, ``init_path`` and ``edge_paths`` are plain path values that no
rule of the schema relates to another field, so each is validated against its own field type
(:func:`_with_run_paths`) and the rest stays as validated; ``num_epochs`` becomes ``retrain.epochs``
(validated >= 1 by :class:`~storage.retraining.options.RetrainOptions`). Credentials stay
``SecretStr`` (copied, never dumped). The choice is written into the run directory's
``config.json`` at once (credentials masked), so a retry of the same flow run (same directory)
reuses it and its schedule never changes mid-run.
"""

from __future__ import annotations

import logging

from pydantic import TypeAdapter, ValidationError

from pbg_core.config import ConfigSchema, config_to_json
from pbg_core.errors import ConfigError
from storage import layout
from storage.checkpoints import CheckpointStore
from storage.fs import reads, urls
from storage.fs.globs import has_glob
from storage.fs.urls import StorageOptions
from storage.retraining.arrivals import Received, place
from storage.retraining.latest import promoted_run, starting_run
from storage.retraining.options import RetrainOptions
from storage.retraining.run_dirs import expand_edge_paths, read_saved_config, run_dir_url

logger = logging.getLogger(__name__)


def check_root(root: str) -> None:
    """Raise ValueError if ``root`` (a retraining config's ``checkpoint_path``) is a glob pattern."""
    if has_glob(root):
        raise ValueError(f"checkpoint_path {root!r}: the root of the run directories cannot be a glob pattern")


def run_config(
    config: ConfigSchema, options: RetrainOptions, run_key: str, arrivals: Received | None = None
) -> ConfigSchema:
    """The run's own config (module docstring), saved as its ``config.json`` on the run's first start.

    On the first start: ``init_path`` = the newest earlier committed run (when
    ``init_from_previous``; else, or if none, the config's ``init_path``) and each ``edge_paths``
    glob replaced by the directories it matches, sorted, then the import generations' edge paths
    under ``incoming.edges_dir`` not among them (a generation imported elsewhere, e.g. a
    train/valid/test import by hand, is trained only where the patterns match it). On a retry (``config.json`` exists) its ``edge_paths`` and ``init_path`` are reused.

    Args:
        config: The resolved config; its ``checkpoint_path`` is the root of the run directories.
        options: Retraining options (``epochs`` replaces the config's ``num_epochs``).
        run_key: This run's directory name (:func:`storage.layout.run_dir_name`).
        arrivals: With ``incoming``: what the run received (its generations' edge paths).

    Raises:
        ValueError: ``run_key`` is not a run directory name, or the root is a glob pattern.
        DataNotFound: an edge path pattern matches no directory; on a first start, ``latest.json``
            names a missing or incomplete run (before anything is written).
        ConfigError: the run directory's saved ``edge_paths`` or ``init_path`` have the wrong type; a
            path to train is a holdout or ``validation.edge_path`` (:func:`check_trainable`).
    """
    root = config.checkpoint_path
    storage = config.storage_options_for_fs()
    check_root(root)
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
    chosen = _with_run_paths(
        config, f"retrain run {run_key}", checkpoint_path=url, init_path=init_path, edge_paths=edge_paths
    )
    check_trainable(chosen.edge_paths, config, arrivals.holdouts if arrivals is not None else [], storage)
    if options.epochs is not None:  # validated (>= 1) by RetrainOptions
        chosen = chosen.model_copy(update={"num_epochs": options.epochs})
    if saved is None:
        CheckpointStore(url, storage).save_config(config_to_json(chosen))  # freezes the choice; secrets masked
    return chosen


def _union(config_paths: list[str], arrivals: Received | None) -> list[str]:
    """The config's edge paths (but holdouts), then the generations' under ``edges_dir`` not among them
    (same place, any spelling). Generations' paths imported elsewhere are trained only if matched."""
    held = [path for path in config_paths if path.rstrip("/").endswith(layout.HOLDOUT_SUFFIX)]
    if held:
        logger.warning("edge_paths patterns match holdout directories, not trained: %s", held)
    paths = [path for path in config_paths if path not in held]
    seen = {place(path) for path in paths}
    for path in arrivals.edge_paths if arrivals is not None else []:
        if place(path) not in seen:
            seen.add(place(path))
            paths.append(path)
    left = [path for path in (arrivals.outside if arrivals is not None else []) if place(path) not in seen]
    if left:
        logger.info(
            "import manifest edge paths outside retrain.incoming.edges_dir and not matched by edge_paths, "
            "not trained: %s",
            left,
        )
    return paths


def check_trainable(
    edge_paths: list[str], config: ConfigSchema, holdouts: list[str], storage: StorageOptions = None
) -> None:
    """Refuse to train a holdout or the config's ``validation.edge_path``.

    A holdout is what the quality gate measures the new data on, and the validation edges what
    early stopping and the best version are chosen on: trained, either would measure the model on
    what it learnt. A holdout is known by its name (``*_holdout``), by its split record
    (``split.json``) or as one of this run's ``holdouts``.

    Raises:
        ConfigError: naming the path, what it is and the field that brought it (nothing written).
    """
    held = {place(path) for path in holdouts}
    validation = config.validation.edge_path if config.validation is not None else None
    for path in edge_paths:
        name = path.rstrip("/")
        if validation is not None and place(path) == place(validation):
            reason = "is validation.edge_path (the edges validation measures)"
        elif name.endswith(layout.HOLDOUT_SUFFIX) or place(path) in held:
            reason = "is a holdout (the edges the quality gate measures)"
        elif reads.exists(urls.join_url(name, layout.SPLIT_FILE), storage):
            reason = f"is a holdout (it holds {layout.SPLIT_FILE}: the edges the quality gate measures)"
        else:
            continue
        raise ConfigError(
            [f"edge_paths: {path} {reason}; a retraining run trains only training edges: remove it from edge_paths"]
        )


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


def _choose_init(config: ConfigSchema, options: RetrainOptions, run_key: str, storage: StorageOptions) -> str | None:
    """The newest earlier committed run's directory, else the config's own ``init_path``."""
    if not options.init_from_previous:
        return config.init_path
    previous = starting_run(config.checkpoint_path, run_key, storage)
    if previous is None:
        logger.info("no earlier committed run under %s: init_path %s", config.checkpoint_path, config.init_path)
        return config.init_path
    logger.info("initialising from %s (version %d)", previous.url, previous.version)
    return previous.url


__all__ = ["check_root", "check_trainable", "run_config"]
