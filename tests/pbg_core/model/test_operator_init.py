"""How relation operators start: identity is PBG's and draws nothing; normal is N(0, scale²), seeded."""

from __future__ import annotations

from typing import Any, get_args

import pytest
import torch

import pbg_core.model.operator_init as operator_init
from pbg_core.config import ConfigSchema, parse_config
from pbg_core.config.validators import OperatorInit
from pbg_core.errors import ConfigError
from pbg_core.model.embedder import MultiRelationEmbedder, build_model
from pbg_core.model.operator_init import OPERATOR_STARTS, start_operator
from pbg_core.model.operators import build_operator

KINDS = ["translation", "diagonal", "linear", "affine", "complex_diagonal"]  # every kind with parameters
DIM = 400  # 200 complex coordinates: enough values per parameter for the statistics below
NUM_DYNAMIC = 5


def config(operator: str, dynamic: bool = False, **fields: Any) -> ConfigSchema:
    """A real config: standard mode has relations a -> b and b -> b, dynamic mode one template."""
    relations = [
        {"name": "r0", "lhs": "a", "rhs": "b", "operator": operator},
        {"name": "r1", "lhs": "b", "rhs": "b", "operator": operator},
    ]
    return parse_config(
        {
            "entities": {"a": {"num_partitions": 1}, "b": {"num_partitions": 1}},
            "relations": relations[:1] if dynamic else relations,
            "dimension": DIM,
            "comparator": "dot",
            "global_emb": False,
            "dynamic_relations": dynamic,
            "entity_path": "ents",
            "edge_paths": ["edges"],
            "checkpoint_path": "ckpt",
            **fields,
        }
    )


def model_of(operator: str, dynamic: bool, seed: int | None, **fields: Any) -> MultiRelationEmbedder:
    return build_model(config(operator, dynamic, **fields), NUM_DYNAMIC if dynamic else 0, seed)


def operator_params(model: MultiRelationEmbedder) -> dict[str, torch.Tensor]:
    return {name: value for name, value in model.state_dict().items() if "operators" in name}


@pytest.fixture
def generators_made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The arguments of every generator operator_init makes from now on (the real function still runs)."""
    calls: list[tuple[Any, ...]] = []
    real = operator_init.torch_generator

    def counting(*args: Any) -> torch.Generator:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(operator_init, "torch_generator", counting)
    return calls


@pytest.mark.parametrize("dynamic", [False, True], ids=["standard", "dynamic"])
@pytest.mark.parametrize("kind", KINDS)
def test_identity_keeps_pbgs_start_and_draws_nothing(kind: str, dynamic: bool, generators_made: list[Any]) -> None:
    global_state = torch.get_rng_state()
    with pytest.warns(UserWarning, match="operator_init_scale=0.5 is ignored"):
        model = model_of(kind, dynamic, seed=3, operator_init="identity", operator_init_scale=0.5)
    assert generators_made == [] and torch.equal(torch.get_rng_state(), global_state)
    fresh = build_operator(kind, DIM, NUM_DYNAMIC if dynamic else 0).state_dict()  # the constructors': PBG's
    params = operator_params(model)
    assert params and all(torch.equal(value, fresh[name.rsplit(".", 1)[1]]) for name, value in params.items())


@pytest.mark.parametrize("dynamic", [False, True], ids=["standard", "dynamic"])
@pytest.mark.parametrize("kind", KINDS)
def test_normal_draws_every_operator_parameter_from_n_0_scale(kind: str, dynamic: bool) -> None:
    scale = 0.01
    params = operator_params(model_of(kind, dynamic, seed=0, operator_init="normal", operator_init_scale=scale))
    sides = {name.split("_", 1)[0] for name in params}
    assert sides == ({"lhs", "rhs"} if dynamic else {"rhs"})  # standard relations have a RHS operator only
    # Standard: two relations' RHS operators; dynamic: the template's LHS and RHS operators.
    assert len(params) == 2 * len(build_operator(kind, DIM).state_dict())
    for name, value in params.items():
        values = value.flatten().double()
        # Loose bounds: the mean within 5 standard errors of 0, the spread within 25% of scale.
        assert abs(values.mean().item()) < 5 * scale / values.numel() ** 0.5, name
        assert 0.75 * scale < values.std().item() < 1.25 * scale, name
    values = list(params.values())
    assert all(not torch.equal(a, b) for i, a in enumerate(values) for b in values[i + 1 :] if a.shape == b.shape)


@pytest.mark.parametrize("kind", KINDS)
def test_dynamic_parameters_hold_a_row_per_relation_type(kind: str) -> None:
    params = operator_params(model_of(kind, True, seed=0, operator_init="normal"))
    fresh = build_operator(kind, DIM, NUM_DYNAMIC).state_dict()
    for name, value in params.items():
        assert value.shape == fresh[name.rsplit(".", 1)[1]].shape and value.shape[0] == NUM_DYNAMIC
        assert len({tuple(row.flatten().tolist()) for row in value}) == NUM_DYNAMIC  # no two rows alike


def test_the_scale_defaults_to_init_scale() -> None:
    params = operator_params(model_of("linear", False, seed=0, operator_init="normal", init_scale=0.1))
    assert all(0.09 < value.std().item() < 0.11 for value in params.values())


@pytest.mark.parametrize("dynamic", [False, True], ids=["standard", "dynamic"])
def test_the_same_seed_gives_the_same_start_and_another_seed_another(dynamic: bool) -> None:
    def start(seed: int) -> dict[str, torch.Tensor]:
        return operator_params(model_of("complex_diagonal", dynamic, seed=seed, operator_init="normal"))

    first, again, other = start(7), start(7), start(8)
    assert first.keys() == again.keys() == other.keys()
    assert all(torch.equal(first[name], again[name]) for name in first)
    assert all(not torch.equal(first[name], other[name]) for name in first)


def test_an_unseeded_model_draws_a_fresh_start() -> None:
    first, second = (operator_params(model_of("diagonal", False, None, operator_init="normal")) for _ in range(2))
    assert all(not torch.equal(first[name], second[name]) for name in first)


def test_each_parameter_has_its_own_generator(generators_made: list[Any]) -> None:
    """A parameter's start is named by (relation, side, parameter), not by its place in the draws."""
    model = model_of("affine", False, seed=4, operator_init="normal")
    assert generators_made == [
        (4, "operator", 0, "rhs", "linear_transformation"),
        (4, "operator", 0, "rhs", "translation"),
        (4, "operator", 1, "rhs", "linear_transformation"),
        (4, "operator", 1, "rhs", "translation"),
    ]
    alone = build_operator("affine", DIM)
    start_operator(alone, "normal", 1e-3, 4, 1, "rhs")
    assert torch.equal(alone.translation, model.rhs_operators[1].translation)  # type: ignore[union-attr]


def test_an_unknown_start_names_the_field_and_the_choices() -> None:
    assert get_args(OperatorInit) == OPERATOR_STARTS  # the config's choices
    with pytest.raises(ConfigError, match=r"^config: operator_init: 'uniform' is not one of identity, normal$"):
        start_operator(build_operator("diagonal", 4), "uniform", 1e-3, 0, 0, "rhs")
