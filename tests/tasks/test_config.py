"""tasks.config.resolve_config: inline or URL configs, overrides, and credentials that survive re-validation."""

from __future__ import annotations

from typing import Any

import pytest

from pbg_core.config import parse_config
from pbg_core.errors import ConfigError
from tasks.config import resolve_config

KEY, SECRET = "AKIAPLANTEDTASK", "planted-task-s3cr3t"


def test_inline_config_keeps_its_credentials_through_overrides(make_config: Any) -> None:
    config = parse_config(make_config(storage_options={"key": KEY, "secret": SECRET}))
    resolved = resolve_config.fn(config, None, ["num_epochs=5", "storage_options.region=eu-west-3"])
    assert resolved.num_epochs == 5
    assert resolved.storage_options_for_fs() == {
        "key": KEY,
        "secret": SECRET,
        "client_kwargs": {"region_name": "eu-west-3"},
    }
    assert resolve_config.fn(config, None, []) == config


def test_an_inline_config_without_overrides_passes_through_unparsed(make_config: Any) -> None:
    """Validated already (by `pbg train`, or Prefect's parameter validation): the same object comes back."""
    config = parse_config(make_config(storage_options={"key": KEY, "secret": SECRET}))
    assert resolve_config.fn(config, None, []) is config


def test_credentials_in_the_overrides_parameter_are_refused(make_config: Any, write_config: Any) -> None:
    path = write_config(make_config())
    with pytest.raises(ConfigError) as info:
        resolve_config.fn(
            None,
            str(path),
            [
                "num_epochs=2",
                f"storage_options.secret={SECRET}",
                f"storage_options.client_kwargs.aws_session_token={SECRET}",
            ],
        )
    assert [p.split(" would")[0] for p in info.value.problems] == [
        "overrides: storage_options.secret=<value>",
        "overrides: storage_options.client_kwargs.aws_session_token=<value>",
    ]
    assert SECRET not in str(info.value)
    resolved = resolve_config.fn(None, str(path), ["storage_options.region=eu-west-3"])
    assert resolved.storage_options_for_fs() == {"client_kwargs": {"region_name": "eu-west-3"}}


def test_error_for_a_bad_secret_names_the_field_not_the_value(make_config: Any, write_config: Any) -> None:
    path = write_config(make_config(storage_options={"key": KEY, "secret": 31415926}))
    with pytest.raises(ConfigError) as info:
        resolve_config.fn(None, str(path), [])
    assert "storage_options.secret: input should be a valid string; got an int (value hidden)" in str(info.value)
    assert "31415926" not in str(info.value) and KEY not in str(info.value)


def test_exactly_one_config_source(make_config: Any, write_config: Any) -> None:
    config = parse_config(make_config())
    with pytest.raises(ConfigError, match="exactly one"):
        resolve_config.fn(config, str(write_config(make_config())), [])
    with pytest.raises(ConfigError, match="exactly one"):
        resolve_config.fn(None, None, [])
