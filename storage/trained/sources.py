"""What a model is loaded from: a config (file, dict or parsed), a checkpoint directory, or a retraining root.

- **A config** (``.json``, ``.yaml``/``.yml`` or ``.py`` file, a dict, a ``ConfigSchema``): its
  ``checkpoint_path`` is read.
- **A checkpoint directory** (anything else given as a path or URL): the config its version
  was trained with (the model file's ``config/json`` attribute, else the directory's
  ``config.json``: :func:`storage.resume_checks.trained_config`), with ``checkpoint_path``
  set to the directory itself, so a checkpoint copied elsewhere loads where it is.
- **A retraining root** (a directory, or a config's ``checkpoint_path``, holding
  ``latest.json``): the promoted run's directory (:func:`storage.retraining.latest.promoted_run`)
  stands for it; a directory given alone is read as that run's checkpoint directory.

``overrides`` (PBG's ``-p key=value``) apply to the config in every case; ``storage_options``
(fsspec keyword arguments) read the source and, when given, every store (a saved
``config.json`` holds its secrets masked).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.config.storage_options import StorageOptions as StorageOptionsModel
from pbg_core.errors import ConfigError, UsageError
from storage import layout
from storage.checkpoint_reader import resolve_version
from storage.checkpoints import CheckpointStore
from storage.config_loader import load_config
from storage.errors import DataNotFound
from storage.fs import reads, urls
from storage.fs.urls import StorageOptions
from storage.resume_checks import trained_config
from storage.retraining.latest import promoted_run
from storage.retraining.run_dirs import list_run_dirs

CONFIG_SUFFIXES = (".json", ".yaml", ".yml", ".py")
PURPOSE = "to load"  # the message of a missing version: "no checkpoint version 7 to load"

Source = str | os.PathLike[str] | Mapping[str, Any] | ConfigSchema


def resolve_config(
    source: Source, version: int | None, overrides: Sequence[str], storage_options: StorageOptions
) -> ConfigSchema:
    """The config a model is loaded with, its ``checkpoint_path`` the checkpoint directory to read.

    Args:
        source: A config file, dict or ``ConfigSchema``; a checkpoint directory; a retraining root.
        version: The version asked for (a checkpoint directory's config is that version's), or None.
        overrides: ``-p key=value`` overrides.
        storage_options: fsspec options to read ``source`` and every store with; None: the config's.

    Raises:
        ConfigError: the config is invalid, or an override is.
        UsageError: overrides given with a ``ConfigSchema`` (parsed already).
        DataNotFound: the file or directory does not exist, holds no checkpoint (no config it was
            trained with), or a retraining root has no promoted run yet.
    """
    if isinstance(source, ConfigSchema):
        if overrides:
            raise UsageError(
                f"overrides {list(overrides)} cannot apply to a parsed ConfigSchema; pass the config file or dict"
            )
        config = source
    elif isinstance(source, Mapping):
        config = parse_config(source, overrides)
    else:
        where = os.fspath(source)
        if where.split("?", 1)[0].lower().endswith(CONFIG_SUFFIXES):
            config = load_config(where, overrides, storage_options)
        else:
            return _with_options(_directory_config(where, version, overrides, storage_options), storage_options)
    config = _with_options(config, storage_options)
    root = _promoted(config.checkpoint_path, config.storage_options_for_fs())
    return config if root is None else config.model_copy(update={"checkpoint_path": root})


def _directory_config(
    url: str, version: int | None, overrides: Sequence[str], storage_options: StorageOptions
) -> ConfigSchema:
    """The config of checkpoint directory ``url`` (or of a retraining root's promoted run), pointed at it."""
    if not reads.exists(url, storage_options):
        raise DataNotFound(
            url,
            f"does not exist; give a config file ({', '.join(CONFIG_SUFFIXES)}), a checkpoint directory or a "
            "retraining root",
        )
    url = _promoted(url, storage_options) or url
    store = CheckpointStore(url, storage_options)
    chosen = resolve_version(store, url, version, PURPOSE)
    raw = trained_config(store, chosen)
    if raw is None:
        raise DataNotFound(
            url,
            f"records no config for version {chosen} (no config/json attribute on {layout.model_file(chosen)}, "
            f"no {layout.CONFIG_FILE}); load it with its config file instead",
        )
    config = parse_config(raw, overrides, source=urls.join_url(url, layout.CONFIG_FILE))
    return config.model_copy(update={"checkpoint_path": url})


def _promoted(url: str, storage_options: StorageOptions) -> str | None:
    """The promoted run's directory if ``url`` is a retraining root, else None.

    Raises:
        DataNotFound: a root whose ``latest.json`` names a missing or incomplete run, or a root of
            run directories none of which is promoted yet.
    """
    if reads.exists(urls.join_url(url, layout.VERSION_FILE), storage_options):
        return None  # a checkpoint directory
    run = promoted_run(url, storage_options)
    if run is not None:
        return run.url
    runs = list_run_dirs(url, storage_options)
    if runs:
        raise DataNotFound(
            urls.join_url(url, layout.LATEST_FILE),
            f"does not exist: none of the {len(runs)} retraining runs under {url} is promoted yet (their quality "
            f"gate has not passed); load a run directory itself, e.g. {urls.join_url(url, runs[-1])}",
        )
    return None


def _with_options(config: ConfigSchema, storage_options: StorageOptions) -> ConfigSchema:
    """``config`` with ``storage_options`` as its stores' options, when given.

    Raises:
        ConfigError: the options are not valid storage options (a key without its secret, ...).
    """
    if storage_options is None:
        return config
    try:
        options = StorageOptionsModel.model_validate(dict(storage_options))
    except ValidationError as exc:  # its messages never hold the values (secrets)
        raise ConfigError([f"storage_options: {error['msg']}" for error in exc.errors()]) from None
    return config.model_copy(update={"storage_options": options})


__all__ = ["PURPOSE", "Source", "resolve_config"]
