"""Raw config dicts before validation: legacy keys, ``-p`` overrides, pydantic errors as lines.

Helpers of :func:`pbg_core.config.parse_config`. They walk the field annotations of
the config models, which are passed in (:class:`Schemas`) rather than imported:
``pbg_core.config`` imports this module.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, get_args, get_origin

from pydantic import BaseModel, ValidationError

from pbg_core.config.storage_options import is_secret_name

# PBG's ``-p`` boolean spellings (matched case-insensitively).
TRUE_STRINGS = frozenset({"1", "true", "yes", "on"})
FALSE_STRINGS = frozenset({"0", "false", "no", "off"})
_NULL_STRINGS = frozenset({"none", "null"})
# The config section whose inputs never appear in messages (credentials).
_HIDDEN_SECTION = "storage_options"


class Schemas(NamedTuple):
    """The config model classes: the whole config, one entity type, one relation type."""

    config: type[BaseModel]
    entity: type[BaseModel]
    relation: type[BaseModel]


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def _field_name(key: object, model: type[BaseModel]) -> object:
    """``key``, or its snake_case form when that names a field of ``model`` (PBG's legacy keys)."""
    if isinstance(key, str) and key not in model.model_fields and _snake(key) in model.model_fields:
        return _snake(key)
    return key


# Top-level keys that are no training config's, said where they belong instead of "did you mean".
_MOVED_KEYS = {
    "retrain": "not a training config key: scheduled retraining is its own flow, pbg-retrain "
    "(`pbg retrain CONFIG`, or deployment pbg-retrain/retrain; docs/retraining.md)",
}


def _suggest(name: object, known: Sequence[str] | Mapping[str, Any]) -> str:
    names = [str(k) for k in known]
    close = difflib.get_close_matches(str(name), names, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f"; known: {', '.join(names)}" if len(names) <= 8 else ""


def _normalise_model_dict(
    raw: Mapping[Any, Any], model: type[BaseModel], path: str, problems: list[str]
) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for key, value in raw.items():
        name = _field_name(key, model)
        if name in out:
            problems.append(f"{path}{name}: given twice (mixedCase and snake_case spellings); keep one")
        out[name] = copy.deepcopy(value)  # the caller's dict is never modified
    return out


def normalise_keys(raw: Mapping[str, Any], schemas: Schemas, problems: list[str]) -> dict[str, Any]:
    """A deep copy of ``raw`` with legacy mixedCase field names in snake_case.

    Args:
        raw: The config as given; not modified.
        schemas: The config model classes whose field names are matched.
        problems: Receives a line per key given in both spellings.

    Returns:
        The normalised copy.
    """
    data = _normalise_model_dict(raw, schemas.config, "", problems)
    entities = data.get("entities")
    if isinstance(entities, Mapping):
        data["entities"] = {
            name: _normalise_model_dict(e, schemas.entity, f"entities.{name}.", problems)
            if isinstance(e, Mapping)
            else e
            for name, e in entities.items()
        }
    relations = data.get("relations")
    if isinstance(relations, list | tuple):
        data["relations"] = [
            _normalise_model_dict(r, schemas.relation, f"relations[{i}].", problems) if isinstance(r, Mapping) else r
            for i, r in enumerate(relations)
        ]
    return data


def _without_none(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without ``None``, whether ``None`` was allowed)."""
    args = get_args(annotation)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return (rest[0] if len(rest) == 1 else annotation), True
    return annotation, False


def _element_schema(annotation: Any) -> Any:
    """What an override path walks into: a model class, ("items", element) or None (a leaf)."""
    base, _ = _without_none(annotation)
    if get_origin(base) in (dict, list):
        return ("items", _element_schema(get_args(base)[-1]))
    if isinstance(base, type) and issubclass(base, BaseModel):
        return base
    return None


def _override_value(value: str, annotation: Any) -> Any:
    """Cast an override string the way PBG does: null, comma lists, lenient booleans.

    A list may also be given as a JSON list (``edge_paths=["a","b"]``); PBG would split it on its
    commas into paths such as ``["a"`` (and a path is then created with that name).
    Numbers stay strings: pydantic casts them and reports a bad one with its path.

    Raises:
        ValueError: a list value that starts with ``[`` but is not a JSON list.
    """
    base, optional = _without_none(annotation)
    if optional and value.strip().lower() in _NULL_STRINGS:
        return None
    if get_origin(base) is list:
        if value.strip().startswith("["):
            return _json_list(value)
        return value.split(",") if value else []
    if base is bool and value.strip().lower() in TRUE_STRINGS | FALSE_STRINGS:
        return value.strip().lower() in TRUE_STRINGS
    return value


def apply_override(data: dict[str, Any], override: str, root: type[BaseModel]) -> list[str]:
    """Apply one ``key=value`` override to ``data`` in place.

    Free keys (a model's extra keys such as ``storage_options.use_ssl``, entries of a
    ``dict[str, Any]`` field such as ``storage_options.client_kwargs.region_name``) are
    created as needed; so is an unset optional section (``storage_options.key``).

    Args:
        data: The normalised config dict (see :func:`normalise_keys`); modified.
        override: A PBG ``-p`` override such as ``"relations.0.all_negs=true"``.
        root: The model class of ``data``, whose field annotations guide the walk.

    Returns:
        The override's problems, one line each (empty when it applied). They never
        quote the value: it may be a credential.
    """
    key, sep, value = override.rpartition("=")  # PBG splits on the last '='
    if not sep or not key:
        shown = override if not sep else "=<value>"
        return [f"override {shown!r}: expected key=value, e.g. num_epochs=10"]
    parts = key.split(".")
    node: Any = data
    schema: Any = root
    for depth, part in enumerate(parts):
        step: _Step
        if isinstance(schema, type) and issubclass(schema, BaseModel) and isinstance(node, dict):
            step = _model_step(node, schema, parts, depth, value)
        elif isinstance(schema, tuple) and isinstance(node, dict | list):
            step = _container_step(node, schema, parts, depth, value)
        else:
            here = ".".join(parts[: depth + 1])
            return [f"{here}: {'.'.join(parts[:depth]) or 'config'} has no entry {part!r}"]
        if isinstance(step, list):
            return step
        node, schema = step
    return []  # unreachable: the loop returns at the last part


def _json_list(value: str) -> list[Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"starts with '[' but is not a JSON list ({error.msg} at character {error.pos}); "
            'give a JSON list such as ["a","b"] or comma-separated values a,b'
        ) from None
    assert isinstance(parsed, list)  # valid JSON that starts with '[' is a list
    return parsed


# One step of an override's walk: its problems (or [] once applied), or the node and schema
# the next part of the key applies to.
_Step = list[str] | tuple[Any, Any]


def _model_step(node: dict[str, Any], schema: type[BaseModel], parts: list[str], depth: int, value: str) -> _Step:
    """Walk ``parts[depth]``, a field of the model ``schema`` whose data is ``node``."""
    part, here, last = parts[depth], ".".join(parts[: depth + 1]), depth == len(parts) - 1
    name = _field_name(part, schema)
    if name not in schema.model_fields:
        if schema.model_config.get("extra") == "allow":
            return _set_free(node, parts[depth:], value, ".".join(parts[:depth]))
        if depth == 0 and part in _MOVED_KEYS:
            return [f"{here}: {_MOVED_KEYS[part]}"]
        return [f"{here}: unknown key{_suggest(part, schema.model_fields)}"]
    annotation = schema.model_fields[name].annotation
    if last:
        try:
            node[name] = _override_value(value, annotation)
        except ValueError as error:
            return [f"{here}: {error}"]
        return []
    element = _element_schema(annotation)
    if element is None:
        return [f"{'.'.join(parts[: depth + 2])}: {here} has no entry {parts[depth + 1]!r}"]
    free = _is_free_mapping(annotation)
    if free or _all_optional(element):
        if node.get(name) is None:
            node[name] = {}  # an unset section or free mapping: the override creates it
        if free:
            return _set_free(node[name], parts[depth + 1 :], value, here)
    if name not in node:
        return [f"{here}: not set in the config, so {'.'.join(parts)!r} does not exist"]
    return node[name], element


def _container_step(
    node: dict[str, Any] | list[Any], schema: tuple[Any, Any], parts: list[str], depth: int, value: str
) -> _Step:
    """Walk ``parts[depth]``, an index of the list or a key of the mapping ``node``."""
    part, here, last = parts[depth], ".".join(parts[: depth + 1]), depth == len(parts) - 1
    index: Any
    if isinstance(node, list):
        if not (part.isdigit() and int(part) < len(node)):
            return [f"{here}: no entry {part!r}; allowed indexes: 0..{len(node) - 1}"]
        index = int(part)
    elif part not in node:
        return [f"{here}: no such entry{_suggest(part, node)}"]
    else:
        index = part
    if last:
        node[index] = value
        return []
    return node[index], schema[1]


def _is_free_mapping(annotation: Any) -> bool:
    """Whether a field is a mapping of untyped values (``dict[str, Any]``): free keys."""
    base, _ = _without_none(annotation)
    return get_origin(base) is dict and _element_schema(get_args(base)[-1]) is None


def _all_optional(schema: Any) -> bool:
    """Whether ``schema`` is a model an override may create from nothing (no required field)."""
    return (
        isinstance(schema, type)
        and issubclass(schema, BaseModel)
        and not any(f.is_required() for f in schema.model_fields.values())
    )


def _set_free(node: dict[str, Any], parts: Sequence[str], value: str, prefix: str) -> list[str]:
    """Set ``parts`` (free keys, created as needed) below ``node`` to ``value``."""
    path = prefix
    for part in parts[:-1]:
        path = f"{path}.{part}" if path else part
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            return [f"{path}: is a {type(node[part]).__name__}, not a mapping, so it has no entries"]
        node = node[part]
    node[parts[-1]] = _free_value(parts[-1], value)
    return []


def _free_value(name: str, value: str) -> Any:
    """An untyped override value: booleans, null and numbers cast; credentials stay strings."""
    if is_secret_name(name):
        return value  # "000123" is a password, not a number
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in _NULL_STRINGS:
        return None
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


_MESSAGES = {
    "missing": "required field is missing",
    "greater_than": "{input} must be > {gt}",
    "greater_than_equal": "{input} must be >= {ge}",
    "less_than": "{input} must be < {lt}",
    "less_than_equal": "{input} must be <= {le}",
    "too_short": "must not be empty",
    "int_parsing": "{input!r} is not an integer",
    "int_type": "{input!r} is not an integer",
    "int_from_float": "{input!r} is not a whole number",
    "float_parsing": "{input!r} is not a number",
    "float_type": "{input!r} is not a number",
    "bool_parsing": "{input!r} is not a boolean; allowed: true/false, yes/no, on/off, 1/0",
    "bool_type": "{input!r} is not a boolean; allowed: true/false, yes/no, on/off, 1/0",
    "string_type": "{input!r} is not a string",
    "list_type": "{input!r} is not a list",
    "dict_type": "{input!r} is not a mapping",
    "model_type": "{input!r} is not a mapping of field names",
    "literal_error": "{input!r} is not one of {expected}",
    "not_a_choice": "{detail}",
}


def _loc_path(loc: tuple[int | str, ...]) -> str:
    """Pydantic's error location as the dotted path users write: ``relations[0].lhs``."""
    text = ""
    for item in loc:
        text += f"[{item}]" if isinstance(item, int) else (f".{item}" if text else str(item))
    return text or "config"


def _describe(err: Any, schemas: Schemas) -> str:
    """The problem part of one pydantic error, in our words."""
    loc = err["loc"]
    if loc and loc[0] == _HIDDEN_SECTION:
        # pbg_core.config.storage_options already replaced the input by its type name.
        message = err["msg"][:1].lower() + err["msg"][1:]
        return f"{message}; got {err.get('input')!r}" if len(loc) > 1 else message
    if err["type"] == "extra_forbidden":
        nested = {"entities": schemas.entity, "relations": schemas.relation}
        model = schemas.config if len(loc) == 1 else nested.get(str(loc[0]), schemas.config)
        if len(loc) == 1 and loc[0] in _MOVED_KEYS:
            return _MOVED_KEYS[str(loc[0])]
        return f"unknown key{_suggest(loc[-1], model.model_fields)}"
    if err["type"] not in _MESSAGES:
        return f"{err.get('input')!r}: {err['msg']}"
    # Bounds of float fields come back as 0.0; show them as users wrote them.
    ctx = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in err.get("ctx", {}).items()}
    return _MESSAGES[err["type"]].format(input=err.get("input"), **ctx)


def error_lines(exc: ValidationError, schemas: Schemas) -> list[str]:
    """One ``path: problem`` line per pydantic error (no pydantic dump, no URLs).

    Args:
        exc: The error of validating a config dict against ``schemas.config``.
        schemas: The config model classes, to suggest close field names for unknown keys.

    Returns:
        The lines, in pydantic's error order.
    """
    return [f"{_loc_path(err['loc'])}: {_describe(err, schemas)}" for err in exc.errors(include_url=False)]
