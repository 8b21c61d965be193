"""The validation and early_stopping sections and their cross-field rules: each refusal names its field."""

from __future__ import annotations

import pytest
from _config_raw import minimal, problems_of
from pydantic import BaseModel

from pbg_core.config import parse_config
from pbg_core.config.quality_sections import EarlyStoppingSchema, ValidationSchema

ALL_NEGS = [{"name": "buys", "lhs": "user", "rhs": "item", "all_negs": True}]


def test_defaults_are_off_as_pbg() -> None:
    config = parse_config(minimal())
    assert config.validation is None and config.early_stopping is None


def test_a_full_section_parses_with_its_defaults() -> None:
    config = parse_config(
        minimal(relations=ALL_NEGS, validation={"edge_path": "data/valid"}, early_stopping={"patience": 3})
    )
    assert config.validation is not None and config.early_stopping is not None
    assert (config.validation.every_epochs, config.validation.metric, config.validation.filter_paths) == (
        1,
        "mrr",
        None,
    )
    assert (config.validation.sample_edges, config.validation.candidates) == (None, None)
    assert (config.early_stopping.patience, config.early_stopping.min_delta) == (3, 0.0)


def test_overrides_change_and_remove_the_sections() -> None:
    raw = minimal(relations=ALL_NEGS, validation={"edge_path": "data/valid"}, early_stopping={"patience": 3})
    config = parse_config(raw, ["early_stopping=null", "validation.every_epochs=5", "validation.metric=R10"])
    assert config.early_stopping is None
    assert config.validation is not None and (config.validation.every_epochs, config.validation.metric) == (5, "r10")
    # A section with a required field is not created by an override (as before): one line naming it.
    assert problems_of(minimal(relations=ALL_NEGS), ("validation.edge_path=v",)) == [
        "validation: not set in the config, so 'validation.edge_path' does not exist"
    ]


def test_early_stopping_without_validation_is_one_line_naming_the_field() -> None:
    assert problems_of(minimal(early_stopping={"patience": 2})) == [
        "early_stopping: needs a validation section (validation.edge_path)"
    ]


def test_sampled_training_negatives_validate_against_all_entities_or_candidates() -> None:
    # Full validation ranks against every entity whatever training samples (tasks/validation_steps.py).
    assert parse_config(minimal(validation={"edge_path": "v"})).validation is not None
    assert parse_config(minimal(validation={"edge_path": "v", "candidates": 50})).validation is not None


def test_a_cluster_run_is_refused_naming_validation() -> None:
    raw = minimal(relations=ALL_NEGS, validation={"edge_path": "v"}, num_machines=2)
    assert [p for p in problems_of(raw) if p.startswith("validation")] == [
        "validation: not supported with num_machines=2 (training on a cluster); allowed: num_machines=1"
    ]


def test_bad_fields_name_their_path() -> None:
    problems = problems_of(
        minimal(
            relations=ALL_NEGS,
            validation={"edge_path": "v", "every_epochs": 0, "metric": "auc", "sample_edges": True},
            early_stopping={"patience": 0, "min_delta": -1},
        )
    )
    joined = "\n".join(problems)
    for path in (
        "validation.every_epochs",
        "validation.metric",
        "validation.sample_edges",
        "early_stopping.patience",
        "early_stopping.min_delta",
    ):
        assert path in joined, (path, problems)
    assert not any(p.startswith("early_stopping: needs") for p in problems)  # its section is only invalid


def test_an_unknown_key_is_refused() -> None:
    problems = problems_of(minimal(relations=ALL_NEGS, validation={"edge_path": "v", "every": 2}))
    assert any(p.startswith("validation.every") for p in problems), problems


@pytest.mark.parametrize("model", [ValidationSchema, EarlyStoppingSchema])
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    assert [name for name, field in model.model_fields.items() if not field.description] == []
