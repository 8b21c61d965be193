"""Tests for pbg_core.config.schema: PBG's fields and defaults, descriptions, cross-field rules."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from _config_raw import minimal, problems_of
from pydantic import BaseModel, ValidationError

from pbg_core.config import (
    ConfigSchema,
    EntitySchema,
    RelationSchema,
    parse_config,
)
from pbg_core.errors import UnknownNameError

# --- defaults and descriptions ---


def test_defaults_equal_pbg() -> None:
    config = parse_config(minimal())
    expected = {
        "init_scale": 1e-3,
        "max_norm": None,
        "global_emb": True,
        "comparator": "cos",
        "bias": False,
        "loss_fn": "ranking",
        "margin": 0.1,
        "regularization_coef": 0.0,
        "regularizer": "N3",
        "init_path": None,
        "checkpoint_preservation_interval": None,
        "num_epochs": 1,
        "num_edge_chunks": None,
        "max_edges_per_chunk": 1_000_000_000,
        "bucket_order": "inside_out",
        "workers": None,
        "batch_size": 1000,
        "num_batch_negs": 50,
        "num_uniform_negs": 50,
        "disable_lhs_negs": False,
        "disable_rhs_negs": False,
        "lr": 1e-2,
        "relation_lr": None,
        "eval_fraction": 0.05,
        "eval_num_batch_negs": 1000,
        "eval_num_uniform_negs": 1000,
        "background_io": False,
        "verbose": 0,
        "hogwild_delay": 2.0,
        "dynamic_relations": False,
        "num_machines": 1,
        "dask_address": None,
        "shared_paths": False,
        "num_partition_servers": -1,
        "distributed_init_method": None,
        "distributed_tree_init_order": True,
        "num_gpus": 0,
        "num_groups_for_partition_server": 16,
        "num_groups_per_sharded_partition_server": 1,
        "partition_shard_size": 250,
        "half_precision": False,
        "seed": None,
        "resident_partitions": None,
        "operator_init": "identity",  # PBG's start, not a PBG field
        "operator_init_scale": None,
    }
    assert {name: getattr(config, name) for name in expected} == expected
    assert config.relations[0] == RelationSchema(name="buys", lhs="user", rhs="item")
    assert config.relations[0].weight == 1.0 and config.relations[0].operator == "none"
    assert config.relations[0].all_negs is False
    assert config.entities["user"] == EntitySchema(num_partitions=1, featurized=False, dimension=None)


def test_every_pbg_field_exists() -> None:
    pbg_fields = {
        "entities", "relations", "dimension", "init_scale", "max_norm", "global_emb", "comparator",
        "bias", "loss_fn", "margin", "regularization_coef", "regularizer", "entity_path",
        "edge_paths", "checkpoint_path", "init_path", "checkpoint_preservation_interval",
        "num_epochs", "num_edge_chunks", "max_edges_per_chunk", "bucket_order", "workers",
        "batch_size", "num_batch_negs", "num_uniform_negs", "disable_lhs_negs", "disable_rhs_negs",
        "lr", "relation_lr", "eval_fraction", "eval_num_batch_negs", "eval_num_uniform_negs",
        "background_io", "verbose", "hogwild_delay", "dynamic_relations", "num_machines",
        "num_partition_servers", "distributed_init_method", "distributed_tree_init_order",
        "num_gpus", "num_groups_for_partition_server", "num_groups_per_sharded_partition_server",
        "partition_shard_size", "half_precision",
    }  # fmt: skip
    assert set(ConfigSchema.model_fields) == pbg_fields | {
        "seed",
        "storage_options",
        "progress_interval",
        "resident_partitions",
        "dask_address",
        "shared_paths",
        "distributed_shared_merge",
        "init_new_entities",
        "operator_init",
        "operator_init_scale",
        "validation",
        "early_stopping",
    }
    assert set(EntitySchema.model_fields) == {"num_partitions", "featurized", "dimension"}
    assert set(RelationSchema.model_fields) == {"name", "lhs", "rhs", "weight", "operator", "all_negs"}


@pytest.mark.parametrize("model", [ConfigSchema, EntitySchema, RelationSchema])
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    missing = [name for name, field in model.model_fields.items() if not field.description]
    assert missing == []


def test_json_schema_has_descriptions_and_choices() -> None:
    schema = ConfigSchema.model_json_schema()
    props = schema["properties"]
    assert "bit-identical" in props["seed"]["description"]
    assert "cores usable by this process" in props["workers"]["description"]
    assert props["loss_fn"]["enum"] == ["ranking", "logistic", "softmax"]
    assert props["bucket_order"]["enum"] == ["random", "affinity", "inside_out", "outside_in"]
    assert props["num_epochs"]["minimum"] == 0
    relation = schema["$defs"]["RelationSchema"]["properties"]
    assert "complex_diagonal" in relation["operator"]["enum"]
    assert relation["weight"]["description"]
    assert schema["$defs"]["EntitySchema"]["properties"]["num_partitions"]["description"]


def test_models_are_frozen() -> None:
    config = parse_config(minimal())
    with pytest.raises(ValidationError):
        config.dimension = 3


def test_entity_dimension() -> None:
    raw = minimal()
    raw["entities"]["item"]["dimension"] = 4
    config = parse_config(raw)
    assert config.entity_dimension("user") == 8
    assert config.entity_dimension("item") == 4
    with pytest.raises(UnknownNameError, match="'usr'.*known: user, item"):
        config.entity_dimension("usr")


# --- cross-field rules ---


CD = "complex_diagonal"


def two_relations(**fields: Any) -> dict[str, Any]:
    raw = minimal(**fields)
    raw["relations"].append({"name": "likes", "lhs": "item", "rhs": "user"})
    return raw


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        (
            minimal(relations=[{"name": "r", "lhs": "user", "rhs": "itm"}]),
            "relations[0].rhs: 'itm' is not an entity type; known: user, item",
        ),
        (
            two_relations(dynamic_relations=True, global_emb=False),
            "relations: dynamic_relations=True needs exactly one relation entry, got 2",
        ),
        (
            minimal(disable_lhs_negs=True, disable_rhs_negs=True),
            "disable_lhs_negs, disable_rhs_negs: both are True, which leaves no negatives; at most one may be True",
        ),
        (minimal(batch_size=1001), "batch_size: 1001 must be a multiple of num_batch_negs (50)"),
        (
            minimal(dimension=7, relations=[{"name": "r", "lhs": "user", "rhs": "user", "operator": CD}]),
            "relations[0].operator: 'complex_diagonal' needs an even dimension, but entity type 'user' has dimension 7",
        ),
        (
            minimal(dynamic_relations=True),
            "global_emb: True is not allowed with dynamic_relations=True; set global_emb=False",
        ),
        (
            minimal(
                regularization_coef=1e-3,
                relations=[{"name": "r", "lhs": "user", "rhs": "item", "operator": "affine"}],
            ),
            "relations[0].operator: 'affine' cannot be regularized (regularization_coef=0.001); use none, "
            "translation, diagonal or complex_diagonal, or set regularization_coef=0",
        ),
        (
            minimal(num_machines=2),
            "num_machines: 2 needs partitioned entity types (PBG: cannot run distributed training with a single "
            "partition); set num_partitions >= 4 for the entity types of your relations, or num_machines: 1",
        ),
        (
            minimal(num_partition_servers=2),
            "num_partition_servers: 2 is not supported by pbg-flow (CPU training; partitions move through storage); allowed: -1, 0",
        ),
    ],
)
def test_cross_field_rule(raw: dict[str, Any], line: str) -> None:
    assert problems_of(raw) == [line]


def test_complex_diagonal_checks_per_entity_dimension() -> None:
    raw = minimal(relations=[{"name": "r", "lhs": "user", "rhs": "item", "operator": "complex_diagonal"}])
    raw["entities"]["item"]["dimension"] = 5
    assert problems_of(raw) == [
        "relations[0].operator: 'complex_diagonal' needs an even dimension, but entity type 'item' has dimension 5"
    ]
    raw["entities"]["item"]["dimension"] = 6
    assert parse_config(raw).entity_dimension("item") == 6


def test_batch_size_rule_skipped_without_batch_negatives() -> None:
    assert parse_config(minimal(batch_size=1001, num_batch_negs=0)).batch_size == 1001


def test_partition_counts_must_agree_per_side() -> None:
    raw = minimal()
    raw["entities"] = {"a": {"num_partitions": 4}, "b": {"num_partitions": 2}, "c": {"num_partitions": 1}}
    raw["relations"] = [{"name": "r1", "lhs": "a", "rhs": "c"}, {"name": "r2", "lhs": "b", "rhs": "c"}]
    assert problems_of(raw) == [
        "entities: partitioned entity types on the lhs side must share one num_partitions; got a=4, b=2"
    ]
    # Different counts on different sides are fine; 1-partition types are unpartitioned.
    raw["relations"] = [{"name": "r1", "lhs": "a", "rhs": "b"}, {"name": "r2", "lhs": "c", "rhs": "b"}]
    assert parse_config(raw).entities["a"].num_partitions == 4


def test_featurized_types_must_be_unpartitioned() -> None:
    raw = minimal()
    raw["entities"]["item"] = {"num_partitions": 2, "featurized": True}
    assert problems_of(raw) == [
        "entities.item.num_partitions: 2 is not allowed for a featurized entity type; allowed: 1"
    ]


def test_gpu_rejected_and_dynamic_config_accepted() -> None:
    assert problems_of(minimal(num_gpus=1)) == [
        "num_gpus: 1 is not supported by pbg-flow (CPU training; partitions move through storage); allowed: 0"
    ]
    config = parse_config(minimal(dynamic_relations=True, global_emb=False, num_partition_servers=0))
    assert config.dynamic_relations and not config.global_emb


def test_logistic_with_cos_only_warns() -> None:
    with pytest.warns(UserWarning, match="comparator='cos'"):
        config = parse_config(minimal(loss_fn="logistic"))
    assert config.loss_fn == "logistic"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_config(minimal(loss_fn="logistic", comparator="dot"))


def test_background_io_only_warns() -> None:
    with pytest.warns(FutureWarning, match="background_io is deprecated"):
        assert parse_config(minimal(background_io=True)).background_io is True


def test_direct_construction_runs_cross_field_rules() -> None:
    raw = minimal(num_gpus=1)
    with pytest.raises(ValidationError, match="num_gpus: 1 is not supported by pbg-flow"):
        ConfigSchema.model_validate(raw)
    assert ConfigSchema.model_validate(minimal()) == parse_config(minimal())


def test_resident_partitions_is_a_positive_int_or_none() -> None:
    assert parse_config(minimal()).resident_partitions is None
    assert parse_config(minimal(resident_partitions=6)).resident_partitions == 6
    assert problems_of(minimal(resident_partitions=0)) == ["resident_partitions: 0 must be >= 1"]
    assert problems_of(minimal(), ("resident_partitions=many",)) == ["resident_partitions: 'many' is not an integer"]


# --- how relation operators start ---


def test_operator_init_takes_identity_or_normal_in_any_case_and_a_positive_scale() -> None:
    config = parse_config(minimal(operator_init="Normal", operator_init_scale=1e-3))
    assert (config.operator_init, config.operator_init_scale) == ("normal", 1e-3)
    assert parse_config(minimal(operator_init="normal")).operator_init_scale is None  # init_scale then
    assert problems_of(minimal(), ("operator_init_scale=0",)) == ["operator_init_scale: 0 must be > 0"]
    assert problems_of(minimal(), ("operator_init_scale=yes",)) == ["operator_init_scale: 'yes' is not a number"]


def test_a_bad_operator_init_override_is_one_line_naming_the_field_and_the_choices() -> None:
    assert problems_of(minimal(), ("operator_init=bogus",)) == ["operator_init: 'bogus' is not one of identity, normal"]
    assert problems_of(minimal(), ("operator_init=normall",)) == [
        "operator_init: 'normall' is not one of identity, normal (did you mean 'normal'?)"
    ]


def test_operator_init_scale_with_the_identity_start_only_warns() -> None:
    with pytest.warns(UserWarning, match=r"operator_init_scale=0.01 is ignored with operator_init='identity'"):
        config = parse_config(minimal(operator_init_scale=0.01))
    assert config.operator_init == "identity"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_config(minimal(operator_init="normal", operator_init_scale=0.01))
        parse_config(minimal())
