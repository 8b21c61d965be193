"""Tests for pbg_core.config.validation: parse_config's round trips, storage_options and secrets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _config_raw import minimal
from pydantic import ValidationError

from pbg_core.config import (
    ConfigSchema,
    config_to_json,
    config_to_raw,
    parse_config,
)
from pbg_core.errors import ConfigError


def test_json_round_trip() -> None:
    raw = minimal(seed=7, comparator="dot", relation_lr=0.5)
    raw["entities"]["item"]["dimension"] = 4
    config = parse_config(raw)
    data = config_to_json(config)
    assert json.loads(json.dumps(data)) == data
    assert parse_config(data) == config
    assert len(data) == len(ConfigSchema.model_fields)  # every field, defaults included


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
