"""Resolve the run's config from a flow parameter, a URL, or a local file.

The config is parsed once per run, where there is something to parse: a file or URL is
read and validated once (with its overrides); an inline ``config`` is already a validated
:class:`ConfigSchema` (``pbg train`` parsed it, or Prefect validated the flow parameter) and
passes through unchanged unless there are overrides to apply.

Credentials in ``storage_options`` stay ``SecretStr`` all the way: applying overrides to an
inline config goes through :func:`config_to_raw` (not the masked JSON form), and the
resolved config is never persisted as a task result (a pickled config would hold them
in clear). A config file read from a URL is fetched with the environment's credentials
(``AWS_*`` variables): its own ``storage_options`` are not known before it is read.
"""

from __future__ import annotations

from collections.abc import Sequence

from pbg_core.config import ConfigSchema, config_to_raw, parse_config
from pbg_core.config.storage_options import is_secret_name
from pbg_core.errors import ConfigError
from storage.config_loader import load_config
from tasks._policies import unpersisted_task


@unpersisted_task(name="resolve-config", task_run_name="resolve config")
def resolve_config(config: ConfigSchema | None, config_url: str | None, overrides: Sequence[str]) -> ConfigSchema:
    """Exactly one of ``config`` (inline) or ``config_url`` (JSON/YAML), then the overrides.

    A deployment never executes Python: ``.py`` URLs are refused here.

    Raises:
        ConfigError: both or neither source given, a ``.py`` URL, an override that sets a
            credential (``overrides`` is a plain flow parameter, recorded in clear), or
            an invalid config.
    """
    if (config is None) == (config_url is None):
        raise ConfigError(["give exactly one of the parameters `config` (inline) or `config_url`"])
    _refuse_credential_overrides(overrides)
    if config is not None:
        if not overrides:
            return config  # validated already: nothing to parse
        return parse_config(config_to_raw(config), list(overrides), source="flow parameter `config`")
    assert config_url is not None
    if config_url.endswith(".py"):
        raise ConfigError(
            [
                f"config_url: {config_url!r} is a Python file; flow runs only read JSON or YAML configs "
                "(convert it with `pbg config-json`, or run `pbg train` locally)"
            ],
        )
    return load_config(config_url, list(overrides))


def _refuse_credential_overrides(overrides: Sequence[str]) -> None:
    """Credentials must not travel in the ``overrides`` flow parameter: Prefect records it in clear.

    (``pbg train -p storage_options.secret=...`` is fine: the CLI applies its overrides
    before the flow starts, and the ``config`` parameter is recorded with secrets masked.)
    """
    bad = [o.partition("=")[0] for o in overrides if any(is_secret_name(p) for p in o.partition("=")[0].split("."))]
    if bad:
        raise ConfigError(
            [
                f"overrides: {key}=<value> would put a credential in the flow run's recorded parameters "
                "(in clear); set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN where the flow "
                "runs, or give storage_options in the `config` parameter"
                for key in bad
            ]
        )
