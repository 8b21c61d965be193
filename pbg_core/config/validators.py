"""Field types and validators shared by the config models.

The choice fields are ``Literal`` strings so the JSON schema lists the allowed values;
:func:`choice_validator` accepts any case on input (PBG matches enums through
``.upper()``) and normalises to the canonical spelling. :data:`NO_BOOL_NUMBERS` refuses
``true``/``false`` for numeric fields. :data:`FROZEN` is every model's configuration.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

Operator = Literal["none", "translation", "diagonal", "linear", "affine", "complex_diagonal"]
Comparator = Literal["dot", "cos", "l2", "squared_l2"]
LossFn = Literal["ranking", "logistic", "softmax"]
Regularizer = Literal["N3"]
BucketOrder = Literal["random", "affinity", "inside_out", "outside_in"]
SharedMerge = Literal["delta", "average"]
NewEntityInit = Literal["random", "neighbor_mean"]
OperatorInit = Literal["identity", "normal"]

FROZEN = ConfigDict(frozen=True, extra="forbid")


def _canonical_choice(value: object, choices: tuple[str, ...]) -> object:
    """Map ``value`` to the canonical spelling of a choice, ignoring case."""
    if not isinstance(value, str):
        return value  # pydantic reports the wrong type
    for choice in choices:
        if choice.lower() == value.strip().lower():
            return choice
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(value.lower(), list(lowered), n=1)
    hint = f" (did you mean {lowered[close[0]]!r}?)" if close else ""
    detail = f"{value!r} is not one of {', '.join(choices)}{hint}"
    raise PydanticCustomError("not_a_choice", "{detail}", {"detail": detail})


def choice_validator(*fields: str) -> Any:
    """A before-validator making the Literal ``fields`` case-insensitive."""

    def canonical(cls: type[BaseModel], value: object, info: ValidationInfo) -> object:
        assert info.field_name is not None  # a field validator always knows its field
        return _canonical_choice(value, get_args(cls.model_fields[info.field_name].annotation))

    return field_validator(*fields, mode="before")(canonical)


def _is_number_field(annotation: object) -> bool:
    """Whether a field annotation (``int``, ``float | None``, ...) is numeric and not ``bool``."""
    options = set(get_args(annotation)) or {annotation}
    return bool(options & {int, float}) and bool not in options


def _refuse_bools(cls: type[BaseModel], value: object, info: ValidationInfo) -> object:
    """Refuse ``true``/``false`` for a numeric field: pydantic would take them as 1 and 0.

    ``"dimension": true`` is a mistake, not a dimension of 1 (a JSON or YAML boolean never
    stands for a number in a PBG config).
    """
    field = cls.model_fields.get(info.field_name or "")
    if isinstance(value, bool) and field is not None and _is_number_field(field.annotation):
        kind = "an integer" if int in (set(get_args(field.annotation)) or {field.annotation}) else "a number"
        raise PydanticCustomError("bool_not_number", "expected {kind}, got a boolean", {"kind": kind})
    return value


NO_BOOL_NUMBERS = field_validator("*", mode="before")(_refuse_bools)
