"""Validating untrusted config input (files, CLI) into a :class:`ConfigSchema`, and back.

:func:`parse_config` accepts legacy mixedCase keys and PBG's ``-p key=value`` overrides,
and raises one :class:`ConfigError` listing every problem with its dotted field path:
field errors and the cross-field rules together. :func:`config_to_json` and
:func:`config_to_raw` turn a config back into data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from pbg_core.config.parsing import Schemas, apply_override, error_lines, normalise_keys
from pbg_core.config.schema import DEFER_CROSS_FIELD, ConfigSchema, cross_field_problems, warn_about
from pbg_core.config.sections import EntitySchema, RelationSchema
from pbg_core.errors import ConfigError

_SCHEMAS = Schemas(ConfigSchema, EntitySchema, RelationSchema)


def config_to_json(config: ConfigSchema) -> dict[str, Any]:
    """The config as JSON-safe data with every field; ``parse_config`` turns it back into ``config``.

    Secrets of ``storage_options`` come out as ``"**********"`` (this is what config.json,
    checkpoint attributes and logs hold), so they alone do not round-trip; use
    :func:`config_to_raw` to re-parse a config with its credentials.
    """
    return config.model_dump(mode="json")


def config_to_raw(config: ConfigSchema) -> dict[str, Any]:
    """The config as a dict for :func:`parse_config` that keeps its secrets (as ``SecretStr``).

    Not JSON-safe on purpose: use it to re-validate a config in memory (e.g. with
    overrides), never to write or log one.
    """
    return config.model_dump(mode="python")


def parse_config(raw: Mapping[str, Any], overrides: Sequence[str] = (), source: str | None = None) -> ConfigSchema:
    """Validate a PBG-style config dict, applying ``-p key=value`` overrides first.

    Args:
        raw: The config as returned by ``get_torchbiggraph_config()`` or read from
            JSON/YAML. Legacy mixedCase keys are accepted. Not modified.
        overrides: PBG ``-p`` overrides such as ``"num_epochs=10"``,
            ``"relations.0.all_negs=true"``, ``"entities.all.num_partitions=4"``
            or ``"edge_paths=a,b"``.
        source: Where ``raw`` came from, quoted in the error.

    Returns:
        The validated config.

    Raises:
        ConfigError: listing every problem, one line each with its dotted path.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError([f"config: expected a mapping of field names, got {type(raw).__name__}"], source)
    problems: list[str] = []
    data = normalise_keys(raw, _SCHEMAS, problems)
    for override in overrides:
        problems.extend(apply_override(data, override, ConfigSchema))
    config, dropped = _validate_fields(data, problems)
    if config is not None:
        problems.extend(p.message for p in cross_field_problems(config) if not p.fields & dropped)
    if problems:
        raise ConfigError(problems, source)
    assert config is not None
    warn_about(config)
    return config


def _validate_fields(data: dict[str, Any], problems: list[str]) -> tuple[ConfigSchema | None, frozenset[str]]:
    """Field-level validation; on errors, retry without the bad optional fields.

    The retry lets cross-field rules still be reported together with the field
    errors; rules touching a dropped field are skipped (its default would mislead).
    """
    context = {DEFER_CROSS_FIELD: True}
    try:
        return ConfigSchema.model_validate(data, context=context), frozenset()
    except ValidationError as exc:
        problems.extend(error_lines(exc, _SCHEMAS))
        bad = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
    fields = ConfigSchema.model_fields
    if any(k in fields and fields[k].is_required() for k in bad) or not bad:
        return None, frozenset(bad)
    trimmed = {k: v for k, v in data.items() if k not in bad}
    try:
        return ConfigSchema.model_validate(trimmed, context=context), frozenset(bad)
    except ValidationError:
        return None, frozenset(bad)
