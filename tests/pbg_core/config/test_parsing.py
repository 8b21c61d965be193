"""Tests for pbg_core.config.parsing: legacy keys, -p overrides and error lines (through parse_config)."""

from __future__ import annotations

import copy

import pytest
from _config_raw import minimal, problems_of

from pbg_core.config import (
    parse_config,
)
from pbg_core.errors import ConfigError


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


def test_a_list_override_may_be_a_json_list() -> None:
    # PBG splits on commas only: '["/x"]' would become the path '["/x"]' (and a directory of that name).
    assert parse_config(minimal(), ['edge_paths=["/data/a", "/data/b,c"]']).edge_paths == ["/data/a", "/data/b,c"]
    assert parse_config(minimal(), ["edge_paths=[]"]).edge_paths == []


def test_a_list_override_that_is_broken_json_names_the_field_and_both_forms() -> None:
    assert problems_of(minimal(), ('edge_paths=["/data/a"',)) == [
        "edge_paths: starts with '[' but is not a JSON list (Expecting ',' delimiter at character 10); "
        'give a JSON list such as ["a","b"] or comma-separated values a,b'
    ]


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
        "num_gpus: 1 is not supported by pbg-flow (CPU training; partitions move through storage); allowed: 0",
    ]


def test_cross_field_rule_on_a_bad_field_is_not_guessed() -> None:
    # num_batch_negs is invalid: the batch_size rule must not be checked against its default (50).
    assert problems_of(minimal(num_batch_negs=-3, batch_size=70)) == ["num_batch_negs: -3 must be >= 0"]
