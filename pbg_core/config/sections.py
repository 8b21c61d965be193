"""The per-type sections of a config: :class:`EntitySchema` and :class:`RelationSchema`.

Field names and defaults are PBG's (docs/formats.md, "Config files").
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from pbg_core.config.validators import FROZEN, NO_BOOL_NUMBERS, Operator, choice_validator


class EntitySchema(BaseModel):
    """One entity type: how it is partitioned and embedded."""

    model_config = FROZEN
    _no_bool_numbers = NO_BOOL_NUMBERS

    num_partitions: int = Field(ge=1, description="Number of partitions of this entity type; 1 means unpartitioned.")
    featurized: bool = Field(
        False, description="Entities are bags of features, each embedded as the mean of its features."
    )
    dimension: int | None = Field(
        None, gt=0, description="Embedding dimension of this type; None uses the global dimension."
    )


class RelationSchema(BaseModel):
    """One relation type: which entity types it links and how it is scored."""

    model_config = FROZEN
    _no_bool_numbers = NO_BOOL_NUMBERS

    name: str = Field(min_length=1, description="Label of the relation type, used in logs and exports.")
    lhs: str = Field(description="Entity type of the left-hand side (a key of entities).")
    rhs: str = Field(description="Entity type of the right-hand side (a key of entities).")
    weight: float = Field(
        1.0, gt=0, description="Multiplier of this relation's loss (dynamic mode uses relations[0] only)."
    )
    operator: Operator = Field(
        "none", description="Transformation applied to the right-hand side embedding before comparing."
    )
    all_negs: bool = Field(
        False,
        description="Use every entity of the partition as a negative (overrides other negative modes).",
    )

    _choices = choice_validator("operator")
