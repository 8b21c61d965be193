"""Tests for pbg_core.config: PBG defaults, overrides, error lines and cross-field rules."""

from __future__ import annotations

import copy
import json
import warnings
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from pbg_core.config import (
    ConfigSchema,
    EntitySchema,
    RelationSchema,
    config_to_json,
    config_to_raw,
    parse_config,
)
from pbg_core.errors import ConfigError, UnknownNameError


def minimal(**fields: Any) -> dict[str, Any]:
    """The smallest valid raw config (two entity types, one relation), plus ``fields``."""
    raw: dict[str, Any] = {
        "entities": {"user": {"num_partitions": 1}, "item": {"num_partitions": 1}},
        "relations": [{"name": "buys", "lhs": "user", "rhs": "item"}],
        "dimension": 8,
        "entity_path": "data/ents",
        "edge_paths": ["data/edges"],
        "checkpoint_path": "model/ckpt",
    }
    raw.update(fields)
    return raw


def problems_of(raw: dict[str, Any], overrides: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, overrides)
    return info.value.problems


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
        "num_partition_servers": -1,
        "distributed_init_method": None,
        "distributed_tree_init_order": True,
        "num_gpus": 0,
        "num_groups_for_partition_server": 16,
        "num_groups_per_sharded_partition_server": 1,
        "partition_shard_size": 250,
        "half_precision": False,
        "seed": None,
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
    assert set(ConfigSchema.model_fields) == pbg_fields | {"seed", "storage_options"}
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


# --- parsing: case, legacy keys, round trip ---


def test_choices_accept_any_case_and_normalise() -> None:
    raw = minimal(comparator="DOT", loss_fn="Softmax", regularizer="n3", bucket_order="Outside_In")
    raw["relations"][0]["operator"] = "Complex_Diagonal"
    config = parse_config(raw)
    assert (config.comparator, config.loss_fn, config.regularizer) == ("dot", "softmax", "N3")
    assert config.bucket_order == "outside_in"
    assert config.relations[0].operator == "complex_diagonal"


def test_legacy_mixed_case_keys() -> None:
    raw = minimal(numEpochs=3, edgePaths=["x"], lossFn="softmax")
    del raw["edge_paths"]
    raw["entities"]["user"] = {"numPartitions": 2}
    raw["relations"][0]["allNegs"] = True
    config = parse_config(raw)
    assert config.num_epochs == 3 and config.edge_paths == ["x"] and config.loss_fn == "softmax"
    assert config.entities["user"].num_partitions == 2
    assert config.relations[0].all_negs is True


def test_legacy_and_snake_spelling_together_is_an_error() -> None:
    assert problems_of(minimal(numEpochs=3, num_epochs=4)) == [
        "num_epochs: given twice (mixedCase and snake_case spellings); keep one"
    ]


def test_input_not_modified() -> None:
    raw = minimal(numEpochs=3)
    before = copy.deepcopy(raw)
    parse_config(raw, ["relations.0.all_negs=true", "entities.user.num_partitions=4"])
    assert raw == before


def test_json_round_trip() -> None:
    raw = minimal(seed=7, comparator="dot", relation_lr=0.5)
    raw["entities"]["item"]["dimension"] = 4
    config = parse_config(raw)
    data = config_to_json(config)
    assert json.loads(json.dumps(data)) == data
    assert parse_config(data) == config
    assert len(data) == len(ConfigSchema.model_fields)  # every field, defaults included


def test_entity_dimension() -> None:
    raw = minimal()
    raw["entities"]["item"]["dimension"] = 4
    config = parse_config(raw)
    assert config.entity_dimension("user") == 8
    assert config.entity_dimension("item") == 4
    with pytest.raises(UnknownNameError, match="'usr'.*known: user, item"):
        config.entity_dimension("usr")


# --- overrides ---


def test_overrides_dotted_list_bool_int_and_null() -> None:
    overrides = [
        "relations.0.all_negs=true",
        "entities.user.num_partitions=4",
        "edge_paths=a,b",
        "num_epochs=10",
        "lr=0.5",
        "bias=ON",
        "global_emb=0",
        "init_path=some/dir",
        "max_norm=1.5",
        "relation_lr=None",
        "checkpoint_preservation_interval=null",
    ]
    config = parse_config(minimal(relation_lr=0.3, checkpoint_preservation_interval=5), overrides)
    assert config.relations[0].all_negs is True
    assert config.entities["user"].num_partitions == 4
    assert config.edge_paths == ["a", "b"]
    assert config.num_epochs == 10 and isinstance(config.num_epochs, int)
    assert config.lr == 0.5 and config.max_norm == 1.5
    assert config.bias is True and config.global_emb is False
    assert config.init_path == "some/dir"
    assert config.relation_lr is None and config.checkpoint_preservation_interval is None


def test_override_key_containing_equals_is_split_on_last() -> None:
    # PBG splits on the last '=': the key is "distributed_init_method=tcp://h:1", which is unknown.
    problems = problems_of(minimal(), ("distributed_init_method=tcp://h:1=2",))
    assert problems[0].startswith("distributed_init_method=tcp://h:1: unknown key")


@pytest.mark.parametrize("value", ["yes", "No", "TRUE", "off", "1"])
def test_override_lenient_bools(value: str) -> None:
    config = parse_config(minimal(), [f"relations.0.all_negs={value}"])
    assert config.relations[0].all_negs is (value.lower() in ("yes", "true", "1"))


def test_override_none_keeps_string_for_non_optional() -> None:
    config = parse_config(minimal(), ["relations.0.operator=none"])
    assert config.relations[0].operator == "none"


def test_override_mixed_case_key() -> None:
    assert parse_config(minimal(), ["numEpochs=5"]).num_epochs == 5


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("dimensoin=5", "dimensoin: unknown key (did you mean 'dimension'?)"),
        ("relations.0.all_neg=1", "relations.0.all_neg: unknown key (did you mean 'all_negs'?)"),
        ("entities.usr.num_partitions=2", "entities.usr: no such entry (did you mean 'user'?)"),
        ("relations.3.lhs=user", "relations.3: no entry '3'; allowed indexes: 0..0"),
        ("num_epochs.x=1", "num_epochs.x: num_epochs has no entry 'x'"),
        ("num_epochs", "override 'num_epochs': expected key=value, e.g. num_epochs=10"),
        ("num_epochs=ten", "num_epochs: 'ten' is not an integer"),
        ("bias=maybe", "bias: 'maybe' is not a boolean; allowed: true/false, yes/no, on/off, 1/0"),
    ],
)
def test_bad_overrides(override: str, line: str) -> None:
    assert problems_of(minimal(), (override,)) == [line]


# --- error lines ---


def test_all_field_errors_at_once() -> None:
    raw = minimal(loss_fn="softmaxx", num_epochs=-1, dimensoin=4, lr="fast")
    problems = problems_of(raw)
    assert sorted(problems) == sorted(
        [
            "loss_fn: 'softmaxx' is not one of ranking, logistic, softmax (did you mean 'softmax'?)",
            "num_epochs: -1 must be >= 0",
            "dimensoin: unknown key (did you mean 'dimension'?)",
            "lr: 'fast' is not a number",
        ]
    )


def test_error_message_has_source_and_no_pydantic_dump() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(num_epochs=-1, batch_size=0), source="conf/x.yaml")
    text = str(info.value)
    assert info.value.source == "conf/x.yaml"
    assert text.splitlines()[0] == "2 problems with the config in conf/x.yaml:"
    assert "pydantic" not in text and "http" not in text and "type=" not in text


def test_nested_field_errors_name_their_path() -> None:
    raw = minimal()
    raw["entities"]["user"] = {"num_partitions": 0, "dimensio": 3}
    raw["relations"][0]["weight"] = 0
    del raw["relations"][0]["name"]
    assert sorted(problems_of(raw)) == sorted(
        [
            "entities.user.num_partitions: 0 must be >= 1",
            "entities.user.dimensio: unknown key (did you mean 'dimension'?)",
            "relations[0].name: required field is missing",
            "relations[0].weight: 0 must be > 0",
        ]
    )


def test_missing_and_empty_required_fields() -> None:
    raw = minimal(entities={}, relations=[])
    del raw["checkpoint_path"]
    assert sorted(problems_of(raw)) == [
        "checkpoint_path: required field is missing",
        "entities: must not be empty",
        "relations: must not be empty",
    ]


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="expected a mapping of field names, got list"):
        parse_config([1, 2])


def test_cross_field_problems_reported_with_field_errors() -> None:
    raw = minimal(num_epochs=-1, num_gpus=1)
    raw["relations"][0]["lhs"] = "usr"
    assert problems_of(raw) == [
        "num_epochs: -1 must be >= 0",
        "relations[0].lhs: 'usr' is not an entity type; known: user, item",
        "num_gpus: 1 is not supported by pbg-flow (single machine, CPU); allowed: 0",
    ]


def test_cross_field_rule_on_a_bad_field_is_not_guessed() -> None:
    # num_batch_negs is invalid: the batch_size rule must not be checked against its default (50).
    assert problems_of(minimal(num_batch_negs=-3, batch_size=70)) == ["num_batch_negs: -3 must be >= 0"]


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
            "num_machines: 2 is not supported by pbg-flow (single machine, CPU); allowed: 1",
        ),
        (
            minimal(num_partition_servers=2),
            "num_partition_servers: 2 is not supported by pbg-flow (single machine, CPU); allowed: -1, 0",
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
        "num_gpus: 1 is not supported by pbg-flow (single machine, CPU); allowed: 0"
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


# --- storage_options and secrets ---

PLANTED_KEY, PLANTED_SECRET = "AKIAPLANTED", "planted-s3cr3t-value"


def with_credentials(**options: Any) -> dict[str, Any]:
    return minimal(storage_options={"key": PLANTED_KEY, "secret": PLANTED_SECRET, **options})


def test_storage_options_default_to_none_and_to_the_environment() -> None:
    config = parse_config(minimal())
    assert config.storage_options is None
    assert config.storage_options_for_fs() == {}
    description = ConfigSchema.model_fields["storage_options"].description or ""
    for variable in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_PROFILE",
    ):
        assert variable in description


def test_storage_options_are_masked_in_json_and_real_for_fsspec() -> None:
    config = parse_config(with_credentials(endpoint_url="http://127.0.0.1:9000"))
    assert config.storage_options_for_fs() == {
        "key": PLANTED_KEY,
        "secret": PLANTED_SECRET,
        "endpoint_url": "http://127.0.0.1:9000",
    }
    for text in (json.dumps(config_to_json(config)), config.model_dump_json(), repr(config), str(config)):
        assert PLANTED_SECRET not in text and PLANTED_KEY not in text
    assert config_to_json(config)["storage_options"]["secret"] == "**********"


def test_raw_round_trip_keeps_credentials_json_round_trip_drops_them() -> None:
    config = parse_config(with_credentials(client_kwargs={"aws_session_token": "tok-planted"}))
    assert parse_config(config_to_raw(config)) == config
    assert parse_config(config_to_raw(config)).storage_options_for_fs()["secret"] == PLANTED_SECRET
    # A config read back from config.json holds masks: they are never used as credentials.
    read_back = parse_config(json.loads(json.dumps(config_to_json(config))))
    assert read_back.storage_options_for_fs() == {}


def test_overrides_set_credentials_free_keys_and_nested_keys() -> None:
    config = parse_config(
        minimal(storage_options=None),
        [
            f"storage_options.key={PLANTED_KEY}",
            f"storage_options.secret={PLANTED_SECRET}",
            "storage_options.anon=false",
            "storage_options.client_kwargs.region_name=eu-west-3",
            "storage_options.config_kwargs.s3.addressing_style=path",
            "storage_options.use_ssl=False",
            "storage_options.max_concurrency=4",
            "storage_options.password=000123",
        ],
    )
    assert config.storage_options_for_fs() == {
        "key": PLANTED_KEY,
        "secret": PLANTED_SECRET,
        "anon": False,
        "client_kwargs": {"region_name": "eu-west-3"},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
        "use_ssl": False,
        "max_concurrency": 4,
        "password": "000123",
    }
    assert "000123" not in json.dumps(config_to_json(config))


def test_an_override_replaces_a_masked_secret() -> None:
    read_back = config_to_json(parse_config(with_credentials()))
    config = parse_config(read_back, ["storage_options.key=AK2", "storage_options.secret=new-secret"])
    assert config.storage_options_for_fs() == {"key": "AK2", "secret": "new-secret"}


@pytest.mark.parametrize(
    ("storage_options", "overrides", "line"),
    [
        (
            {"key": PLANTED_KEY, "secret": 20240607},
            (),
            "storage_options.secret: input should be a valid string; got an int (value hidden)",
        ),
        (
            {"key": PLANTED_KEY, "secret": PLANTED_SECRET},
            ("storage_options.anon=" + PLANTED_SECRET,),
            "storage_options.anon: input should be a valid boolean, unable to interpret input; "
            "got a str (value hidden)",
        ),
        (
            {"key": PLANTED_KEY},
            (),
            "storage_options: key is set but secret is not: give both, or neither to use "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or the instance role",
        ),
        (None, ("=" + PLANTED_SECRET,), "override '=<value>': expected key=value, e.g. num_epochs=10"),
        (
            None,
            ("storage_option.secret=" + PLANTED_SECRET,),
            "storage_option: unknown key (did you mean 'storage_options'?)",
        ),
        (
            {"endpoint_url": PLANTED_SECRET},
            ("storage_options.endpoint_url.x=1",),
            "storage_options.endpoint_url.x: storage_options.endpoint_url has no entry 'x'",
        ),
    ],
)
def test_storage_options_errors_never_quote_a_value(
    storage_options: Any, overrides: tuple[str, ...], line: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(storage_options=storage_options), overrides)
    assert info.value.problems == [line]
    for planted in (PLANTED_KEY, PLANTED_SECRET, "20240607"):
        assert planted not in str(info.value)


def test_direct_construction_error_hides_secrets() -> None:
    with pytest.raises(ValidationError) as info:
        ConfigSchema.model_validate(minimal(storage_options={"key": PLANTED_KEY, "secret": 20240607}))
    assert "storage_options.secret" in str(info.value)
    assert "20240607" not in str(info.value) and PLANTED_KEY not in str(info.value)


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
