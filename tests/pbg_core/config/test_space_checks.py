"""Tests for pbg_core.config.space_checks: every refusal of a search space against its base config."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from _config_raw import minimal

from pbg_core.config import ConfigSchema, parse_config
from pbg_core.config.search_space import SearchSpace, parse_space
from pbg_core.config.space_checks import CHECKPOINT_SHAPE, DATA_SHAPE, STUDY_OWNED, check_space
from pbg_core.errors import SearchSpaceError

BASE = minimal(num_batch_negs=50, comparator="dot")
TUNING_DOC = Path(__file__).resolve().parents[3] / "docs" / "tuning.md"


def space(**params: dict[str, Any]) -> SearchSpace:
    return parse_space({"params": params}, "kin.yaml")


def floats(low: float, high: float, **more: Any) -> dict[str, Any]:
    return {"type": "float", "low": low, "high": high, **more}


def ints(low: int, high: int, **more: Any) -> dict[str, Any]:
    return {"type": "int", "low": low, "high": high, **more}


def choices(*values: Any) -> dict[str, Any]:
    return {"type": "categorical", "choices": list(values)}


def refusals(params: dict[str, dict[str, Any]], config: ConfigSchema | None = None) -> list[str]:
    with pytest.raises(SearchSpaceError) as info:
        check_space(space(**params), config or parse_config(BASE), "spaces/kin.yaml")
    assert info.value.source == "spaces/kin.yaml"
    return info.value.problems


def concrete(pattern: str) -> str:
    """A path of the minimal config for a table pattern: ``*`` is relation 0 or entity user."""
    return pattern.replace("relations.*", "relations.0").replace("entities.*", "entities.user")


def test_a_valid_space_passes_and_warns_nothing() -> None:
    # logistic with cos is legal but warned about when a config is read: not again per end.
    with pytest.warns(UserWarning, match="not recommended"):
        config = parse_config(minimal(num_batch_negs=50, loss_fn="logistic", comparator="cos"))
    valid = space(
        lr=floats(0.01, 0.5, log=True),
        regularization_coef=floats(1e-4, 1e-1, log=True),
        batch_size=ints(250, 2000, step=250),
        loss_fn=choices("softmax", "logistic"),
        dimension=ints(8, 64, step=8),
        margin=floats(0.05, 0.5, step=0.05),
        num_epochs=ints(1, 5),
        max_norm=choices(None, 1.0),
        global_emb=choices(True, False),
        **{
            "relations.0.operator": choices("none", "diagonal", "complex_diagonal"),
            "relations.0.all_negs": choices(True, False),
            "entities.user.dimension": ints(8, 32, log=True),
        },
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_space(valid, config)


def test_unknown_fields_name_the_closest() -> None:
    assert refusals(
        {
            "lrr": floats(0.1, 0.5),
            "numEpochs": ints(1, 5),
            "relations.0.opertor": choices("diagonal"),
            "relations.3.operator": choices("diagonal"),
            "relations.x.operator": choices("diagonal"),
            "entities.usr.dimension": ints(8, 16),
            "dimension.x": ints(8, 16),
        }
    ) == [
        "lrr: unknown field (did you mean 'lr'?)",
        "numEpochs: unknown field (did you mean 'num_epochs'?)",
        "relations.0.opertor: unknown field (did you mean 'operator'?)",
        "relations.3: no entry '3'; allowed indexes: 0..0",
        "relations.x: no entry 'x'; allowed indexes: 0..0",
        "entities.usr: no entry 'usr' (did you mean 'user'?)",
        "dimension.x: dimension is a single value, it has no field 'x'",
    ]


def test_empty_and_inverted_ranges() -> None:
    assert refusals(
        {
            "lr": floats(0.5, 0.1),
            "num_epochs": ints(3, 3),
            "margin": floats(0.1, 0.2, step=0.5),
            "batch_size": ints(250, 500, step=300),
            "regularization_coef": floats(0.0, 0.1, log=True),
            "num_uniform_negs": ints(10, 100, log=True, step=10),
            "init_scale": floats(1e-4, 1e-2, log=True, step=1e-3),
            "loss_fn": choices(),
        }
    ) == [
        "lr: low 0.5 >= high 0.1: the range is empty or inverted; give low < high",
        "num_epochs: low 3 >= high 3: the range is empty or inverted; give low < high",
        "margin: step 0.5 is larger than the range 0.1..0.2",
        "batch_size: step 300 is larger than the range 250..500",
        "regularization_coef: log scale needs low > 0, got 0.0",
        "num_uniform_negs: log and step 10 together: a log scale takes no step; drop one",
        "init_scale: log and step 0.001 together: a log scale takes no step; drop one",
        "loss_fn: no choices; give at least one",
    ]


def test_duplicate_choices_given_or_read_the_same() -> None:
    assert refusals(
        {
            "loss_fn": choices("softmax", "logistic", "softmax"),
            "comparator": choices("dot", "DOT"),
            "bias": choices(True, "yes", False),
            "lr": choices(0.1, 0.10000),
        }
    ) == [
        "loss_fn: choice 'softmax' is given twice; keep one",
        "comparator: choices 'dot' and 'DOT' both read as 'dot'; keep one",
        "bias: choices True and 'yes' both read as True; keep one",
        "lr: choice 0.1 is given twice; keep one",
    ]


def test_param_types_the_field_cannot_take() -> None:
    assert refusals(
        {
            "batch_size": floats(250, 2000),
            "loss_fn": floats(0, 1),
            "bias": ints(0, 1),
            "relations.0": choices("x"),
            "entities.user": ints(1, 2),
        }
    ) == [
        "batch_size: an integer field; use type: int (or categorical)",
        "loss_fn: one of ranking, logistic, softmax; use type: categorical with choices from them",
        "bias: true or false; use type: categorical with choices [true, false]",
        "relations.0: a section, not a single value; tune one of its fields "
        "(name, lhs, rhs, weight, operator, all_negs)",
        "entities.user: a section, not a single value; tune one of its fields (num_partitions, featurized, dimension)",
    ]


def test_values_the_field_refuses_are_said_by_its_own_validator() -> None:
    assert refusals(
        {
            "lr": floats(-0.5, 0.5),
            "batch_size": ints(0, 500, step=50),
            "num_batch_negs": choices(50, "many"),
            "global_emb": choices(True, "maybe"),
            "relations.0.operator": choices("diagonal", "complex"),
            "eval_fraction": floats(0.0, 1.5),
        }
    ) == [
        "lr: low -0.5: -0.5 must be >= 0",
        "batch_size: low 0: 0 must be >= 1",
        "num_batch_negs: choice 'many': 'many' is not an integer",
        "global_emb: choice 'maybe': 'maybe' is not a boolean; allowed: true/false, yes/no, on/off, 1/0",
        "relations.0.operator: choice 'complex': 'complex' is not one of none, translation, diagonal, linear, "
        "affine, complex_diagonal (did you mean 'complex_diagonal'?)",
        "eval_fraction: high 1.5: 1.5 must be <= 1",
    ]


def test_values_the_cross_field_rules_refuse() -> None:
    config = parse_config(minimal(num_batch_negs=50, dimension=7, regularization_coef=0.1))
    assert refusals(
        {
            "batch_size": ints(250, 2001),
            "relations.0.operator": choices("diagonal", "complex_diagonal", "linear"),
        },
        config,
    ) == [
        "batch_size: high 2001: 2001 must be a multiple of num_batch_negs (50)",
        "relations.0.operator: choice 'complex_diagonal': 'complex_diagonal' needs an even dimension, "
        "but entity type 'user' has dimension 7",
        "relations.0.operator: choice 'complex_diagonal': 'complex_diagonal' needs an even dimension, "
        "but entity type 'item' has dimension 7",
        "relations.0.operator: choice 'linear': 'linear' cannot be regularized (regularization_coef=0.1); use "
        "none, translation, diagonal or complex_diagonal, or set regularization_coef=0",
    ]


# A table entry of a field the schema does not have yet is checked once it does.
@pytest.mark.parametrize("pattern", sorted(p for p in STUDY_OWNED if p.split(".")[0] in ConfigSchema.model_fields))
def test_fields_the_study_owns(pattern: str) -> None:
    path = concrete(pattern)
    assert refusals({path: choices(1)}) == [f"{path}: not tunable: {STUDY_OWNED[pattern]}"]


@pytest.mark.parametrize(
    "path", ["entity_path", "edge_paths", "checkpoint_path", "init_path", "storage_options.endpoint_url"]
)
def test_paths_and_storage_options_are_the_studys(path: str) -> None:
    (problem,) = refusals({path: choices("s3://elsewhere")})
    assert problem.startswith(f"{path}: not tunable: ")


def test_free_storage_option_keys_are_the_studys_too() -> None:
    # -p accepts any key below storage_options (fsspec backends' own options): still not tunable.
    assert refusals({"storage_options.use_ssl": choices(True, False)}) == [
        "storage_options.use_ssl: not tunable: every trial uses the base config's filesystem options and credentials"
    ]


@pytest.mark.parametrize("pattern", sorted(DATA_SHAPE))
def test_fields_fixed_by_the_imported_data(pattern: str) -> None:
    path = concrete(pattern)
    assert refusals({path: choices(2)}) == [
        f"{path}: fixed by the imported data ({DATA_SHAPE[pattern]}); trials cannot differ in it"
    ]


@pytest.mark.parametrize("pattern", sorted(CHECKPOINT_SHAPE))
def test_checkpoint_shapes_are_refused_only_with_init_path(pattern: str) -> None:
    path = concrete(pattern)
    param = choices(True, False) if pattern in ("global_emb", "bias") else choices(4, 8)
    if pattern.endswith("operator"):
        param = choices("diagonal", "complex_diagonal")
    check_space(space(**{path: param}), parse_config(BASE))  # no init_path: each trial starts fresh
    assert refusals({path: param}, parse_config({**BASE, "init_path": "model/start"})) == [
        f"{path}: changes {CHECKPOINT_SHAPE[pattern]} mid-study; drop it or unset init_path"
    ]


def test_every_problem_at_once_one_line_each_naming_the_file() -> None:
    config = parse_config({**BASE, "init_path": "model/start"})
    bad = {
        "lrr": floats(0.1, 0.5),
        "regularization_coef": floats(0.0, 0.1, log=True),
        "batch_size": ints(0, 2001),
        "loss_fn": choices(),
        "comparator": choices("dot", "hinge"),
        "seed": ints(0, 10),
        "entities.user.num_partitions": ints(1, 4),
        "dimension": ints(8, 64),
        "lr": floats(0.01, 0.5, log=True),  # fine: no line
    }
    expected = [
        "lrr: unknown field (did you mean 'lr'?)",
        "regularization_coef: log scale needs low > 0, got 0.0",
        "batch_size: low 0: 0 must be >= 1",
        "batch_size: high 2001: 2001 must be a multiple of num_batch_negs (50)",
        "loss_fn: no choices; give at least one",
        "comparator: choice 'hinge': 'hinge' is not one of dot, cos, l2, squared_l2",
        "seed: not tunable: each trial's seed is the base config's seed plus the trial's number",
        "entities.user.num_partitions: fixed by the imported data (the partitions its edge buckets were imported "
        "into); trials cannot differ in it",
        "dimension: changes the shape of init_path's embeddings mid-study; drop it or unset init_path",
    ]
    with pytest.raises(SearchSpaceError) as info:
        check_space(space(**bad), config, "spaces/kin.yaml")
    assert info.value.problems == expected
    assert str(info.value).splitlines() == [
        f"{len(expected)} problems with the search space in spaces/kin.yaml:",
        *(f"  - {line}" for line in expected),
    ]


def test_one_problem_is_one_line() -> None:
    with pytest.raises(SearchSpaceError) as info:
        check_space(space(seed=ints(0, 3)), parse_config(BASE), "kin.yaml")
    assert str(info.value) == (
        "search space in kin.yaml: seed: not tunable: each trial's seed is the base config's seed plus the "
        "trial's number"
    )


def test_the_tuning_doc_lists_every_refused_field() -> None:
    doc = TUNING_DOC.read_text(encoding="utf-8")
    missing = [p for p in [*STUDY_OWNED, *DATA_SHAPE, *CHECKPOINT_SHAPE] if f"`{p}`" not in doc]
    assert missing == []
