"""Tests for pbg_core.config.space_digest: the normalized form, a stable digest, and a resumed study's refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from pbg_core.config.search_space import parse_space
from pbg_core.config.space_digest import check_unchanged, normalized_space, space_changes, space_digest
from pbg_core.errors import SearchSpaceError

SPACE: dict[str, Any] = {
    "study": "kin",
    "pruner": {"type": "median", "startup_trials": 3},
    "params": {
        "lr": {"type": "float", "low": 0.01, "high": 0.5, "log": True},
        "batch_size": {"type": "int", "low": 250, "high": 2000, "step": 250},
        "loss_fn": {"type": "categorical", "choices": ["softmax", "logistic"]},
    },
}


def reordered(raw: dict[str, Any]) -> dict[str, Any]:
    """The same mapping with every key order reversed, at every depth."""
    if isinstance(raw, dict):
        return {key: reordered(raw[key]) for key in reversed(list(raw))}
    return raw


def with_changes(**params: dict[str, Any]) -> dict[str, Any]:
    return {**SPACE, "params": {**SPACE["params"], **params}}


def test_normalized_form_fills_defaults_and_round_trips() -> None:
    space = parse_space(SPACE, "kin.yaml")
    normal = normalized_space(space)
    assert list(normal["params"]) == ["batch_size", "loss_fn", "lr"]
    assert normal["params"]["lr"] == {"type": "float", "low": 0.01, "high": 0.5, "log": True, "step": None}
    assert normal["pruner"] == {"type": "median", "startup_trials": 3, "warmup_evaluations": 0}
    assert normal["sampler"] == {"type": "tpe", "seed": None} and normal["metric"] == "mrr"
    # What a study stores (JSON) reads back as the same space, with the same digest.
    again = parse_space(json.loads(json.dumps(normal)), "elsewhere.json")
    assert again == space and space_digest(again) == space_digest(space)


def test_digest_ignores_key_order_spelling_of_numbers_and_defaults() -> None:
    digest = space_digest(parse_space(SPACE, "kin.yaml"))
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert space_digest(parse_space(reordered(SPACE), "kin.yaml")) == digest
    text = yaml.safe_dump(reordered(SPACE), sort_keys=False).replace("0.01", "1.0e-2")
    assert "1.0e-2" in text
    assert space_digest(parse_space(yaml.safe_load(text), "kin.yaml")) == digest
    explicit = {**SPACE, "metric": "mrr", "sampler": {"type": "tpe"}, "direction": "maximize"}
    assert space_digest(parse_space(explicit, "kin.yaml")) == digest


@pytest.mark.parametrize(
    "raw",
    [
        with_changes(lr={"type": "float", "low": 0.01, "high": 0.9, "log": True}),
        with_changes(margin={"type": "float", "low": 0.1, "high": 0.5}),
        with_changes(loss_fn={"type": "categorical", "choices": ["logistic", "softmax"]}),  # choice order counts
        {**SPACE, "metric": "r10"},
        {**SPACE, "sampler": {"seed": 1}},
        {**SPACE, "study": "kin2"},
    ],
)
def test_digest_changes_with_the_space(raw: dict[str, Any]) -> None:
    assert space_digest(parse_space(raw, "kin.yaml")) != space_digest(parse_space(SPACE, "kin.yaml"))


def test_changes_are_listed_sections_first_then_params_by_path() -> None:
    stored = normalized_space(parse_space(SPACE, "kin.yaml"))
    params = {**SPACE["params"], "margin": {"type": "float", "low": 0.1, "high": 0.5}}
    del params["batch_size"]
    params["lr"] = {"type": "float", "low": 0.01, "high": 0.9, "log": True}
    changed = parse_space({**SPACE, "pruner": {"type": "none"}, "params": params}, "kin.yaml")
    assert space_changes(stored, changed) == [
        "pruner.type: 'median' -> 'none'",
        "params.batch_size: removed",
        "params.lr.high: 0.5 -> 0.9",
        "params.margin: added",
    ]
    assert space_changes(stored, parse_space(reordered(SPACE), "kin.yaml")) == []


def test_a_resumed_study_refuses_a_changed_space_naming_the_first_change() -> None:
    stored = normalized_space(parse_space(SPACE, "kin.yaml"))
    check_unchanged(stored, parse_space(reordered(SPACE), "kin.yaml"), "kin.yaml")  # same space: resumes
    changed = parse_space(
        with_changes(
            lr={"type": "float", "low": 0.01, "high": 0.9, "log": True},
            dimension={"type": "int", "low": 8, "high": 64},
        ),
        "kin.yaml",
    )
    with pytest.raises(SearchSpaceError) as info:
        check_unchanged(stored, changed, "kin.yaml")
    assert str(info.value) == (
        "search space in kin.yaml: params.dimension: added (and 1 more): the study was started with another space "
        "and keeps it; restore the space or start a new study (another study name)"
    )
