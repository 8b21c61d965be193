"""storage_options: typed S3 keys, free keys, secrets masked everywhere but ``to_fsspec``."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel, SecretStr, ValidationError

from pbg_core.config.storage_options import SECRET_MASK, StorageOptions, is_secret_name

KEY, SECRET, TOKEN = "AKIAPLANTEDKEY", "planted-s3cr3t-1", "planted-t0ken-2"


def full() -> StorageOptions:
    return StorageOptions.model_validate(
        {
            "key": KEY,
            "secret": SECRET,
            "token": TOKEN,
            "region": "eu-west-3",
            "anon": False,
            "client_kwargs": {"aws_session_token": TOKEN, "verify": False},
            "config_kwargs": {"connect_timeout": 5},
            "password": "pw-planted-3",
            "sas_token": "sas-planted-4",
            "use_ssl": False,
            "credentials": {"type": "service_account", "client_email": "mail-planted-5"},
        }
    )


PLANTED = (KEY, SECRET, TOKEN, "pw-planted-3", "sas-planted-4", "mail-planted-5")


@pytest.mark.parametrize(
    "name",
    [
        "key",
        "secret",
        "token",
        "password",
        "Password",
        "aws_secret_access_key",
        "aws_session_token",
        "aws_access_key_id",
        "account_key",
        "client_credentials",
        "sas_token",
        "api_key",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["endpoint_url", "region_name", "anon", "use_ssl", "profile", "sse_kms_key_id"])
def test_plain_names(name: str) -> None:
    assert not is_secret_name(name)


def test_every_serialization_masks_every_secret() -> None:
    options = full()
    renderings = [
        repr(options),
        str(options),
        json.dumps(options.model_dump(mode="json")),
        options.model_dump_json(),
        str(options.model_dump()),
        json.dumps(jsonable_encoder({"options": options})),
    ]
    for text in renderings:
        assert not [p for p in PLANTED if p in text], text
        assert SECRET_MASK in text
    dumped = options.model_dump(mode="json")
    assert dumped["secret"] == SECRET_MASK
    assert dumped["client_kwargs"] == {"aws_session_token": SECRET_MASK, "verify": False}
    # Everything below a secret-named key is secret, whatever the leaf is called.
    assert dumped["credentials"] == {"type": SECRET_MASK, "client_email": SECRET_MASK}


def test_to_fsspec_reveals_and_leaves_unset_values_to_the_environment() -> None:
    assert full().to_fsspec() == {
        "key": KEY,
        "secret": SECRET,
        "token": TOKEN,
        "anon": False,
        "client_kwargs": {"region_name": "eu-west-3", "aws_session_token": TOKEN, "verify": False},
        "config_kwargs": {"connect_timeout": 5},
        "password": "pw-planted-3",
        "sas_token": "sas-planted-4",
        "use_ssl": False,
        "credentials": {"type": "service_account", "client_email": "mail-planted-5"},
    }
    assert StorageOptions().to_fsspec() == {}
    explicit = StorageOptions(region="a", client_kwargs={"region_name": "b"})
    assert explicit.to_fsspec() == {"client_kwargs": {"region_name": "b"}}


def test_a_masked_secret_is_never_revealed(caplog: pytest.LogCaptureFixture) -> None:
    read_back = StorageOptions.model_validate(json.loads(full().model_dump_json()))
    with caplog.at_level(logging.WARNING, logger="pbg_core.config.storage_options"):
        revealed = read_back.to_fsspec()
    assert SECRET_MASK not in json.dumps(revealed)
    assert "key" not in revealed and "secret" not in revealed and "token" not in revealed
    assert revealed["client_kwargs"] == {"region_name": "eu-west-3", "verify": False}
    assert "storage_options.secret holds the mask" in caplog.text
    assert "AWS_SECRET_ACCESS_KEY" in caplog.text


class Holder(BaseModel):
    storage_options: StorageOptions | None = None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"key": KEY, "secret": 987654321}, "Input should be a valid string"),
        ({"key": KEY, "secret": SECRET, "anon": SECRET}, "Input should be a valid boolean"),
        ({"client_kwargs": SECRET}, "Input should be a valid dictionary"),
        (SECRET, "Input should be a valid dictionary or instance of StorageOptions"),
        ({"client_kwargs": {"aws_secret_access_key": 987654321}}, "a secret must be a string, got int"),
        ({"key": KEY}, "key is set but secret is not"),
    ],
)
def test_validation_errors_never_show_the_input(raw: object, expected: str) -> None:
    with pytest.raises(ValidationError) as info:
        Holder(storage_options=raw)
    text = str(info.value) + json.dumps(info.value.errors(include_url=False), default=repr)
    assert expected in text
    assert KEY not in text and SECRET not in text and "987654321" not in text
    assert "value hidden" in text


def test_secret_fields_are_password_inputs_in_the_form() -> None:
    props = StorageOptions.model_json_schema()["properties"]
    for name in ("key", "secret", "token"):
        assert {"format": "password", "type": "string", "writeOnly": True} in props[name]["anyOf"]
    assert all(field.description for field in StorageOptions.model_fields.values())


def test_secretstr_inputs_are_kept() -> None:
    options = StorageOptions(key=SecretStr(KEY), secret=SecretStr(SECRET), extra_token=SecretStr(TOKEN))
    assert options.to_fsspec() == {"key": KEY, "secret": SECRET, "extra_token": TOKEN}


def test_credentials_can_be_left_out_and_secrets_named_without_their_values() -> None:
    options = StorageOptions(
        key="AKIA1", secret="s3cr3t", endpoint_url="http://e", client_kwargs={"aws_session_token": "t0k"}
    )
    assert options.credentials() == ("AKIA1", "s3cr3t", None)
    assert options.secret_names() == ["client_kwargs.aws_session_token", "key", "secret"]
    bare = options.without_credentials()
    assert bare.credentials() == (None, None, None) and bare.secret_names() == ["client_kwargs.aws_session_token"]
    assert bare.to_fsspec() == {"endpoint_url": "http://e", "client_kwargs": {"aws_session_token": "t0k"}}
    assert StorageOptions(key=SECRET_MASK, secret=SECRET_MASK).secret_names() == []  # a config read back
