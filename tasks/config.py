"""Resolve the run's config from a flow parameter, a URL, or a local file."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task

from pbg_core.config import ConfigSchema, config_to_json, parse_config
from pbg_core.errors import ConfigError
from storage.config_loader import load_config
from tasks._policies import NO_CACHE


def load_config_file(path: str, overrides: Sequence[str] = ()) -> ConfigSchema:
    """Load a PBG ``.py``, JSON or YAML config from a local path or URL, with ``-p`` overrides."""
    return load_config(path, list(overrides))


@task(name="resolve-config", cache_policy=NO_CACHE)
def resolve_config(
    config: ConfigSchema | None, config_url: str | None, overrides: Sequence[str]
) -> ConfigSchema:
    """Exactly one of ``config`` (inline) or ``config_url`` (JSON/YAML), then the overrides.

    A deployment never executes Python: ``.py`` URLs are refused here.
    """
    if (config is None) == (config_url is None):
        raise ConfigError(["give exactly one of the parameters `config` (inline) or `config_url`"])
    if config is not None:
        return parse_config(config_to_json(config), list(overrides), source="flow parameter `config`")
    assert config_url is not None
    if config_url.endswith(".py"):
        raise ConfigError(
            [f"config_url: {config_url!r} is a Python file; flow runs only read JSON or YAML configs "
             "(convert it with `pbg config-json`, or run `pbg train` locally)"],
        )
    return load_config(config_url, list(overrides))
