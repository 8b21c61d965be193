"""Tests for pbg_core.config.search_space: the file's structure, defaults, errors, and a point as -p overrides."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from _config_raw import minimal

from pbg_core.config import parse_config
from pbg_core.config.search_space import (
    CategoricalParam,
    FloatParam,
    HyperbandPruner,
    IntParam,
    MedianPruner,
    NoPruner,
    Sampler,
    SearchSpace,
    override_text,
    parse_space,
    point_overrides,
)
from pbg_core.errors import ConfigError, SearchSpaceError

SPACE_YAML = """
study: kinships-complex
metric: mrr
pruner: {type: median, startup_trials: 5, warmup_evaluations: 2}
sampler: {type: tpe, seed: 0}
params:
  lr: {type: float, low: 0.01, high: 0.5, log: true}
  regularization_coef: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
  batch_size: {type: int, low: 250, high: 2000, step: 250}
  loss_fn: {type: categorical, choices: [softmax, logistic]}
"""


def problems(raw: Any, source: str | None = "space.yaml") -> list[str]:
    with pytest.raises(SearchSpaceError) as info:
        parse_space(raw, source)
    assert info.value.source == source
    return info.value.problems


def test_yaml_space_reads_every_section() -> None:
    space = parse_space(yaml.safe_load(SPACE_YAML), "spaces/kin.yaml")
    assert space.study == "kinships-complex"  # set in the file: the file's name is not used
    assert space.metric == "mrr" and space.direction == "maximize"
    assert space.pruner == MedianPruner(type="median", startup_trials=5, warmup_evaluations=2)
    assert space.sampler == Sampler(type="tpe", seed=0)
    assert space.params == {
        "lr": FloatParam(type="float", low=0.01, high=0.5, log=True),
        "regularization_coef": FloatParam(type="float", low=1e-4, high=0.1, log=True),
        "batch_size": IntParam(type="int", low=250, high=2000, step=250),
        "loss_fn": CategoricalParam(type="categorical", choices=["softmax", "logistic"]),
    }


def test_json_space_is_the_same_space() -> None:
    raw = yaml.safe_load(SPACE_YAML)
    assert parse_space(json.loads(json.dumps(raw)), "kin.json") == parse_space(raw, "kin.yaml")


def test_defaults_and_study_from_the_file_name() -> None:
    space = parse_space({"params": {"lr": {"type": "float", "low": 0.01, "high": 0.5}}}, "s3://b/dir/my-study.v2.yaml")
    assert space.study == "my-study.v2"
    assert (space.metric, space.direction) == ("mrr", "maximize")
    assert space.pruner == MedianPruner(type="median", startup_trials=5, warmup_evaluations=0)
    assert space.sampler == Sampler(type="tpe", seed=None)
    param = space.params["lr"]
    assert isinstance(param, FloatParam) and (param.log, param.step) == (False, None)


def test_pruner_variants_and_case_insensitive_choices() -> None:
    params = {"lr": {"type": "float", "low": 0.01, "high": 0.5}}
    median = parse_space({"pruner": {"startup_trials": 2}, "params": params}, "a.yaml").pruner
    assert median == MedianPruner(type="median", startup_trials=2, warmup_evaluations=0)  # type: median by default
    hyperband = parse_space({"pruner": {"type": "hyperband", "max_evaluations": 10}, "params": params}, "a.yaml")
    assert hyperband.pruner == HyperbandPruner(
        type="hyperband", min_evaluations=1, max_evaluations=10, reduction_factor=3
    )
    assert parse_space({"pruner": {"type": "none"}, "params": params}, "a.yaml").pruner == NoPruner(type="none")
    space = parse_space({"metric": "R10", "sampler": {"type": "Random"}, "params": params}, "a.yaml")
    assert (space.metric, space.sampler.type) == ("r10", "random")


def test_choices_keep_their_types() -> None:
    choices = [1, 1.5, True, None, "softmax"]
    space = parse_space({"params": {"x": {"type": "categorical", "choices": choices}}}, "a.yaml")
    param = space.params["x"]
    assert isinstance(param, CategoricalParam)
    assert [type(c) for c in param.choices] == [int, float, bool, type(None), str]


def test_every_structural_problem_at_once_with_its_key_path() -> None:
    raw = {
        "metrc": "mrr",
        "metric": "auc",
        "pruner": {"startup_trials": -1, "warmup": 1},
        "sampler": {"type": "grid", "sed": 1},
        "params": {
            "lr": {"type": "flot", "low": 0.1, "high": 1},
            "dimension": {"low": 8, "high": 64},
            "batch_size": {"type": "int", "low": "250", "hgh": 2000},
            "max_norm": {"type": "float", "low": True, "high": float("inf")},
            "loss_fn": {"type": "categorical", "choices": ["softmax", ["logistic"], float("nan"), {"a": 1}]},
        },
    }
    assert problems(raw) == [
        "metric: 'auc' is not one of mrr, r1, r10",
        "pruner.startup_trials: -1 must be >= 0",
        "pruner.warmup: unknown key; known: type, startup_trials, warmup_evaluations",
        "sampler.type: 'grid' is not one of tpe, random",
        "sampler.sed: unknown key (did you mean 'seed'?)",
        "params.lr: type 'flot' is not one of float, int, categorical",
        "params.dimension: type is missing; allowed: float, int, categorical",
        "params.batch_size.low: '250' is not an integer",
        "params.batch_size.high: required key is missing",
        "params.batch_size.hgh: unknown key (did you mean 'high'?)",
        "params.max_norm.low: True is not a number",
        "params.max_norm.high: inf is not a finite number",
        "params.loss_fn.choices: choice 1 (['logistic']), 2 (nan), 3 ({'a': 1}): not a string, finite number, "
        "boolean or null",
        "metrc: unknown key (did you mean 'metric'?)",
    ]


def test_the_error_names_the_file_and_gives_one_line_per_problem() -> None:
    with pytest.raises(SearchSpaceError) as info:
        parse_space({"params": {"lr": {"type": "float", "low": "a", "high": "b"}}}, "spaces/kin.yaml")
    assert isinstance(info.value, ConfigError)  # `pbg tune` reports it as any config error
    assert str(info.value).splitlines() == [
        "2 problems with the search space in spaces/kin.yaml:",
        "  - params.lr.low: 'a' is not a number",
        "  - params.lr.high: 'b' is not a number",
    ]


def test_not_a_mapping_no_params_and_bad_study_names() -> None:
    assert problems(["lr"]) == ["expected a mapping with a params key, got list"]
    assert problems({"study": "x"}) == ["params: required key is missing"]
    assert problems({"study": "x", "params": {}}) == ["params: must not be empty"]
    params = {"lr": {"type": "float", "low": 0.1, "high": 1}}
    assert problems({"study": "../up", "params": params}) == [
        "study: '../up' is not a study name (letters, digits, '.', '_' and '-', starting with a letter or digit)"
    ]
    assert problems({"params": params}, "my space.yaml") == [
        "study: not set, and the file's name 'my space' is not a study name (letters, digits, '.', '_' and '-', "
        "starting with a letter or digit); set study"
    ]
    assert problems({"params": params}, None) == ["study: required key is missing"]


def test_override_text_is_what_dash_p_reads() -> None:
    assert [override_text(v) for v in (True, False, None, 3, 0.001, 1e-05, "softmax")] == [
        "true",
        "false",
        "null",
        "3",
        "0.001",
        "1e-05",
        "softmax",
    ]


def test_point_to_overrides_to_config() -> None:
    space = parse_space(yaml.safe_load(SPACE_YAML), "kin.yaml")
    point = {"loss_fn": "logistic", "lr": 0.0123, "batch_size": 500, "regularization_coef": 1e-05}
    overrides = point_overrides(space, point)
    assert overrides == ["batch_size=500", "loss_fn=logistic", "lr=0.0123", "regularization_coef=1e-05"]
    config = parse_config(minimal(comparator="dot"), overrides)
    expected = {"batch_size": 500, "loss_fn": "logistic", "lr": 0.0123, "regularization_coef": 1e-05}
    assert {name: getattr(config, name) for name in expected} == expected
    assert config == parse_config(minimal(comparator="dot")).model_copy(update=expected)  # nothing else changed


def test_point_with_nested_paths_booleans_and_null() -> None:
    space = SearchSpace(
        study="s",
        params={
            "relations.0.operator": CategoricalParam(type="categorical", choices=["diagonal", "complex_diagonal"]),
            "entities.user.dimension": IntParam(type="int", low=4, high=16, step=4),
            "global_emb": CategoricalParam(type="categorical", choices=[True, False]),
            "max_norm": CategoricalParam(type="categorical", choices=[None, 1.0]),
        },
    )
    point = {"relations.0.operator": "complex_diagonal", "entities.user.dimension": 12, "global_emb": False}
    overrides = point_overrides(space, {**point, "max_norm": None})
    config = parse_config(minimal(max_norm=2.0), overrides)
    assert config.relations[0].operator == "complex_diagonal"
    assert config.entities["user"].dimension == 12 and config.global_emb is False and config.max_norm is None


def test_point_that_does_not_match_the_space_is_refused() -> None:
    space = parse_space(yaml.safe_load(SPACE_YAML), "kin.yaml")
    with pytest.raises(SearchSpaceError) as info:
        point_overrides(space, {"lr": 0.1, "batch_size": 500, "loss_fn": "softmax", "margin": 0.2})
    assert info.value.problems == [
        "regularization_coef: the point has no value for it",
        "margin: the point has a value, but the space has no such param",
    ]
