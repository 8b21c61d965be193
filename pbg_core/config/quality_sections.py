"""The quality sections of a config (new in pbg-flow; PBG has neither): :class:`ValidationSchema` and
:class:`EarlyStoppingSchema`.

With ``validation`` set, a training run ranks a held-apart edge path (filtered, as ``pbg eval
--filtered``) every ``every_epochs`` epochs, records the result per checkpoint version and keeps
the best version under ``best.json`` (docs/checkpoint-protocol.md, "The best version");
``early_stopping`` ends the run when the metric stops improving. Both default to None: no
validation, as PBG. The cross-field rules (early stopping needs validation, ...) are
:func:`pbg_core.config.rules.validation_problems`'s.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from pbg_core.config.validators import FROZEN, NO_BOOL_NUMBERS, choice_validator

ValidationMetric = Literal["mrr", "r1", "r10"]


class ValidationSchema(BaseModel):
    """Which edges validate the run, how often, and how they are ranked."""

    model_config = FROZEN
    _no_bool_numbers = NO_BOOL_NUMBERS

    edge_path: str = Field(
        min_length=1,
        description="Directory (or URL) of bucketed validation edges, imported like edge_paths (not trained on).",
    )
    every_epochs: int = Field(
        1, ge=1, description="Validate after every this many epochs (after the epoch's last iteration)."
    )
    filter_paths: list[str] | None = Field(
        None,
        description="Edge paths whose edges are known true, removed from the negatives (filtered ranking); "
        "None: edge_paths plus edge_path.",
    )
    metric: ValidationMetric = Field(
        "mrr", description="The metric early stopping and the best version follow (higher is better)."
    )
    sample_edges: int | None = Field(
        None, ge=1, description="Rank a seeded sample of this many validation edges (big graphs); None: all."
    )
    candidates: int | None = Field(
        None,
        ge=1,
        description="Rank each edge against this many distinct uniform candidates of its partition (big "
        "graphs); None: against all entities, whatever negatives the relations train with.",
    )

    _choices = choice_validator("metric")


class EarlyStoppingSchema(BaseModel):
    """When a run stops because the validation metric no longer improves."""

    model_config = FROZEN
    _no_bool_numbers = NO_BOOL_NUMBERS

    patience: int = Field(ge=1, description="Validations without improvement after which training stops.")
    min_delta: float = Field(
        0.0, ge=0, description="An improvement of the metric smaller than this does not count as one."
    )
