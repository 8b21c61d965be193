"""Tests for pbg_core.config.validators: case-insensitive choices, booleans refused as numbers."""

from __future__ import annotations

import pytest
from _config_raw import minimal, problems_of
from pydantic import ValidationError

from pbg_core.config import (
    ConfigSchema,
    parse_config,
)


def test_choices_accept_any_case_and_normalise() -> None:
    raw = minimal(comparator="DOT", loss_fn="Softmax", regularizer="n3", bucket_order="Outside_In")
    raw["relations"][0]["operator"] = "Complex_Diagonal"
    config = parse_config(raw)
    assert (config.comparator, config.loss_fn, config.regularizer) == ("dot", "softmax", "N3")
    assert config.bucket_order == "outside_in"
    assert config.relations[0].operator == "complex_diagonal"


# --- strict numbers: booleans are not numbers ---


def test_booleans_are_refused_for_numeric_fields() -> None:
    """``"dimension": true`` used to be taken as 1; every int/float field now refuses booleans."""
    raw = minimal(dimension=True, lr=False, workers=True)
    raw["entities"]["user"]["num_partitions"] = True
    raw["relations"][0]["weight"] = True
    assert sorted(problems_of(raw)) == [
        "dimension: True: expected an integer, got a boolean",
        "entities.user.num_partitions: True: expected an integer, got a boolean",
        "lr: False: expected a number, got a boolean",
        "relations[0].weight: True: expected a number, got a boolean",
        "workers: True: expected an integer, got a boolean",
    ]
    assert problems_of(minimal(), ("dimension=true",)) == ["dimension: 'true' is not an integer"]
    with pytest.raises(ValidationError, match="expected an integer, got a boolean"):
        ConfigSchema.model_validate(minimal(dimension=True))


def test_booleans_stay_valid_for_bool_fields_and_numbers_for_numeric_ones() -> None:
    config = parse_config(minimal(bias=True, global_emb=False, lr=1, dimension=8))
    assert config.bias is True and config.global_emb is False and config.lr == 1.0 and config.dimension == 8
