"""The search-space file of a tuning study: which config fields it tunes, over which values, and how.

A YAML or JSON mapping (read by :func:`storage.config_loader.load_search_space`; docs/tuning.md,
"Search space")::

    study: kinships-complex      # optional: the file's name without its suffix
    metric: mrr                  # mrr | r1 | r10
    pruner: {type: median, startup_trials: 5, warmup_evaluations: 2}
    sampler: {type: tpe, seed: 0}
    params:                      # the dotted paths of `-p key=value`
      lr: {type: float, low: 0.01, high: 0.5, log: true}
      batch_size: {type: int, low: 250, high: 2000, step: 250}
      loss_fn: {type: categorical, choices: [softmax, logistic]}

This module holds the file's typed form (:class:`SearchSpace`, :func:`parse_space` for the
structure) and :func:`point_overrides`, which turns one sampled point into the ``-p`` overrides
:func:`pbg_core.config.parse_config` applies. Whether the space fits a config (field names,
ranges, types, the fields a study owns) is :func:`pbg_core.config.space_checks.check_space`; its
normalized form and digest, with which a resumed study refuses a changed space, are in
:mod:`pbg_core.config.space_digest`. Pure: no Optuna here (the tuning flow maps these sections
onto it), no file access.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from pbg_core.config.validators import FROZEN, choice_validator
from pbg_core.errors import SearchSpaceError

Metric = Literal["mrr", "r1", "r10"]
# A study's directory is tune-<study>: letters, digits, '.', '_' and '-', not starting with '.'.
STUDY_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
_NAME_RULE = "letters, digits, '.', '_' and '-', starting with a letter or digit"
Choice = bool | int | float | str | None
# Strict: a YAML/JSON number is a number (true is not 1, "5" is not 5); frozen, unknown keys refused.
STRICT = ConfigDict(**FROZEN, strict=True)


class FloatParam(BaseModel):
    """A float drawn from [low, high] (Optuna's ``suggest_float``)."""

    model_config = STRICT

    type: Literal["float"] = Field(description="float: a real number in [low, high].")
    low: float = Field(allow_inf_nan=False, description="Smallest value (included); below high.")
    high: float = Field(allow_inf_nan=False, description="Largest value (included); above low.")
    log: bool = Field(False, description="Draw on a log scale (low must be > 0); for rates and weights.")
    step: float | None = Field(
        None, gt=0, allow_inf_nan=False, description="Draw only low + k * step; None: any value. Not with log."
    )


class IntParam(BaseModel):
    """An integer drawn from [low, high] (Optuna's ``suggest_int``)."""

    model_config = STRICT

    type: Literal["int"] = Field(description="int: an integer in [low, high].")
    low: int = Field(description="Smallest value (included); below high.")
    high: int = Field(description="Largest value (included); above low.")
    log: bool = Field(False, description="Draw on a log scale (low must be > 0); only with step 1.")
    step: int = Field(1, ge=1, description="Draw only low + k * step.")


class CategoricalParam(BaseModel):
    """One of listed values (Optuna's ``suggest_categorical``)."""

    model_config = STRICT

    type: Literal["categorical"] = Field(description="categorical: one of choices.")
    choices: list[Any] = Field(
        description="The values, each a string, number, boolean or null, no two the same; their order is "
        "part of the space (a resumed study compares it)."
    )

    @field_validator("choices")
    @classmethod
    def _single_values(cls, choices: list[Any]) -> list[Any]:
        """Keep each choice as given (``1`` stays an int, ``true`` a boolean); refuse lists, mappings, nan."""
        bad = [
            f"{i} ({choice!r})"
            for i, choice in enumerate(choices)
            if not (choice is None or isinstance(choice, bool | int | float | str))
            or (isinstance(choice, float) and not math.isfinite(choice))
        ]
        if bad:
            raise PydanticCustomError(
                "not_single_value",
                "choice {bad}: not a string, finite number, boolean or null",
                {"bad": ", ".join(bad)},
            )
        return choices


Param = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class MedianPruner(BaseModel):
    """Stop a trial whose validation is below the median of earlier trials' at the same point."""

    model_config = STRICT

    type: Literal["median"] = Field(default="median", description="median: Optuna's MedianPruner (the default).")
    startup_trials: int = Field(
        default=5, ge=0, description="Trials that run to the end before any is pruned (Optuna's n_startup_trials)."
    )
    warmup_evaluations: int = Field(
        default=0,
        ge=0,
        description="Validations a trial makes before it may be pruned (Optuna's n_warmup_steps, counted in "
        "validations, each validation.every_epochs epochs).",
    )


class HyperbandPruner(BaseModel):
    """Successive halving over several brackets (Optuna's HyperbandPruner)."""

    model_config = STRICT

    type: Literal["hyperband"] = Field(description="hyperband: Optuna's HyperbandPruner.")
    min_evaluations: int = Field(
        1, ge=1, description="Validations every trial makes before it may be pruned (Optuna's min_resource)."
    )
    max_evaluations: int | None = Field(
        None,
        ge=1,
        description="Validations of a trial that runs to the end (Optuna's max_resource); None: Optuna's "
        "'auto', taken from the first trial that finishes.",
    )
    reduction_factor: int = Field(
        3, ge=2, description="1 / the fraction of trials each round keeps (Optuna's reduction_factor)."
    )


class NoPruner(BaseModel):
    """Never stop a trial early: each trains to its end (or its early stopping)."""

    model_config = STRICT

    type: Literal["none"] = Field(description="none: no pruning (Optuna's NopPruner).")


Pruner = Annotated[MedianPruner | HyperbandPruner | NoPruner, Field(discriminator="type")]


class Sampler(BaseModel):
    """How the next trial's parameters are chosen."""

    model_config = STRICT

    type: Literal["tpe", "random"] = Field(
        default="tpe", description="tpe: Optuna's TPESampler (learns from finished trials); random: RandomSampler."
    )
    seed: int | None = Field(default=None, ge=0, description="Seed of the sampler's draws; None: unseeded.")

    _choices = choice_validator("type")


class SearchSpace(BaseModel):
    """A whole search-space file (its fields are the file's top-level keys)."""

    model_config = STRICT

    study: str = Field(
        pattern=STUDY_NAME,
        description="Name of the study (its directory is tune-<study>); default: the space file's name "
        "without its suffix. Letters, digits, '.', '_' and '-'.",
    )
    metric: Metric = Field(
        "mrr",
        description="The validation number the study maximizes and prunes on: mrr (filtered mean reciprocal "
        "rank), r1 or r10 (Hits@1, Hits@10). validation.metric is set to it.",
    )
    direction: Literal["maximize"] = Field(
        "maximize", description="maximize, the only direction: mrr, r1 and r10 grow with quality."
    )
    pruner: Pruner = Field(
        default=MedianPruner(), description="When a trial is stopped early: median, hyperband or none."
    )
    sampler: Sampler = Field(default=Sampler(), description="How trials' parameters are drawn: tpe or random.")
    params: dict[str, Param] = Field(
        min_length=1,
        description="The tuned config fields, by the dotted path `-p` takes (lr, relations.0.operator, "
        "entities.all.dimension), each a float, int or categorical range.",
    )

    _choices = choice_validator("metric", "direction")

    @field_validator("pruner", mode="before")
    @classmethod
    def _median_by_default(cls, value: Any) -> Any:
        """A pruner mapping without ``type`` is a median pruner (the default pruner's settings)."""
        if isinstance(value, Mapping) and "type" not in value:
            return {"type": "median", **value}
        return value


def parse_space(raw: Any, source: str | None = None) -> SearchSpace:
    """The search space ``raw`` (a parsed YAML/JSON document) describes; its structure only.

    Ranges and fields are checked against a config by
    :func:`pbg_core.config.space_checks.check_space`.

    Args:
        raw: The file's content.
        source: The file it came from, named in errors; its name is the default ``study``.

    Returns:
        The typed space.

    Raises:
        SearchSpaceError: every structural problem (unknown or missing keys, wrong types), one
            line each starting with its key path.
    """
    if not isinstance(raw, Mapping):
        raise SearchSpaceError([f"expected a mapping with a params key, got {type(raw).__name__}"], source)
    data = dict(raw)
    named_by_file = False
    if data.get("study") is None and source is not None:
        data["study"] = os.path.splitext(os.path.basename(source.split("?", 1)[0]))[0]
        named_by_file = True
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        problems = [_error_line(err) for err in exc.errors(include_url=False)]
    if named_by_file:
        unnamed = f"study: not set, and the file's name {data['study']!r} is not a study name ({_NAME_RULE}); set study"
        problems = [unnamed if p.startswith("study:") else p for p in problems]
    raise SearchSpaceError(problems, source)


# The variants of each tagged section, by tag: an unknown key is matched against its variant's keys.
_VARIANTS: dict[str, dict[str, type[BaseModel]]] = {
    "params": {"float": FloatParam, "int": IntParam, "categorical": CategoricalParam},
    "pruner": {"median": MedianPruner, "hyperband": HyperbandPruner, "none": NoPruner},
}
_MESSAGES = {
    "missing": "required key is missing",
    "greater_than": "{input} must be > {gt}",
    "greater_than_equal": "{input} must be >= {ge}",
    "int_parsing": "{input!r} is not an integer",
    "int_type": "{input!r} is not an integer",
    "int_from_float": "{input!r} is not a whole number",
    "float_parsing": "{input!r} is not a number",
    "float_type": "{input!r} is not a number",
    "finite_number": "{input!r} is not a finite number",
    "bool_parsing": "{input!r} is not a boolean; allowed: true, false",
    "bool_type": "{input!r} is not a boolean; allowed: true, false",
    "string_type": "{input!r} is not a string",
    "string_pattern_mismatch": "{input!r} is not a study name (" + _NAME_RULE + ")",
    "too_short": "must not be empty",
    "list_type": "{input!r} is not a list",
    "dict_type": "{input!r} is not a mapping",
    "model_type": "{input!r} is not a mapping of keys",
    "model_attributes_type": "{input!r} is not a mapping of keys",
    "literal_error": "{input!r} is not one of {expected}",
    "not_a_choice": "{detail}",
    "union_tag_invalid": "type {tag!r} is not one of {allowed}",
    "union_tag_not_found": "type is missing; allowed: {allowed}",
}


def _error_line(err: Any) -> str:
    """One pydantic error as ``key.path: problem`` (the variant's tag left out of the path)."""
    loc = [str(part) for part in err["loc"]]
    tags = [i for i, part in enumerate(loc) if _is_tag(loc, i)]
    path = ".".join(part for i, part in enumerate(loc) if i not in tags) or "space"
    if err["type"] == "extra_forbidden":
        known = _known_keys(loc, tags)
        return f"{path}: unknown key{_suggest(loc[-1], known)}"
    template = _MESSAGES.get(err["type"])
    if template is None:  # our own errors (choices) are worded already
        return f"{path}: {err['msg']}"
    ctx = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in err.get("ctx", {}).items()}
    allowed = ", ".join(_VARIANTS.get(loc[0] if loc else "", {}))
    return f"{path}: {template.format(input=err.get('input'), allowed=allowed, **ctx)}"


def _is_tag(loc: list[str], i: int) -> bool:
    """Whether ``loc[i]`` is the tag pydantic inserts for a variant of params.X or pruner."""
    section = loc[0] if loc else ""
    position = 2 if section == "params" else 1
    return section in _VARIANTS and i == position and loc[i] in _VARIANTS[section]


def _known_keys(loc: list[str], tags: list[int]) -> list[str]:
    """The keys allowed where an unknown key ``loc[-1]`` was found."""
    if tags:
        return list(_VARIANTS[loc[0]][loc[tags[0]]].model_fields)
    if len(loc) == 2 and loc[0] == "sampler":
        return list(Sampler.model_fields)
    return list(SearchSpace.model_fields)


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f"; known: {', '.join(known)}"


def override_text(value: Choice) -> str:
    """``value`` as the text of a ``-p key=value`` override (``true``, ``null``, ``0.001``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        assert math.isfinite(value)  # ranges and choices are finite (allow_inf_nan=False, JSON/YAML)
        return repr(value)
    return str(value)


def point_overrides(space: SearchSpace, point: Mapping[str, Choice]) -> list[str]:
    """The ``-p`` overrides (``lr=0.05``) that give a config the values of one sampled point.

    Args:
        space: The space the point was drawn from.
        point: A value per param path, as a sampler draws them.

    Returns:
        One override per param, in path order, for :func:`pbg_core.config.parse_config`.

    Raises:
        SearchSpaceError: the point lacks a param of the space or has one the space does not.
    """
    missing = [path for path in sorted(space.params) if path not in point]
    unknown = [path for path in sorted(point) if path not in space.params]
    if missing or unknown:
        raise SearchSpaceError(
            [f"{path}: the point has no value for it" for path in missing]
            + [f"{path}: the point has a value, but the space has no such param" for path in unknown]
        )
    return [f"{path}={override_text(point[path])}" for path in sorted(space.params)]
