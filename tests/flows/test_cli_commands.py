"""``pbg import``/``export``/``serve`` option checks: ``serve --config-url`` is read and validated first."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _cli import cli_environment, run_pbg
from s3_server import free_port

from flows.cli_commands import config_url_problem


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("htp://host/config.json", "--config-url 'htp://host/config.json': unknown URL scheme 'htp'; give a local"),
        ("{root}/config.py", "file type '.py' is not served; allowed: .json, .yaml, .yml"),
        ("{root}/config.txt", "file type '.txt' is not served; allowed: .json, .yaml, .yml"),
        ("s3://bucket", "file type '(none)' is not served"),
        ("{root}/missing.json", "--config-url: {root}/missing.json: config file does not exist"),
        ("{root}/bad.json", "--config-url: 5 problems with the config in {root}/bad.json:"),
    ],
)
def test_a_config_url_that_no_run_could_read_is_named_with_what_is_allowed(
    tmp_path: Path, url: str, expected: str
) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"entities": {"n": {"num_partitions": 1}}}))
    problem = config_url_problem(url.format(root=tmp_path), [])
    assert problem is not None and expected.format(root=tmp_path) in problem, problem


def test_a_valid_config_url_with_its_overrides_passes(
    make_config: Callable[..., dict[str, Any]], write_config: Callable[[dict[str, Any], str], Path]
) -> None:
    url = str(write_config(make_config(), "config.yaml"))
    assert config_url_problem(url, ["num_epochs=2"]) is None
    assert "num_epochs" in str(config_url_problem(url, ["num_epochs=zero"]))


def test_serve_with_a_bad_config_url_stops_before_anything_starts(tmp_path: Path) -> None:
    # Nothing listens on the API URL: the old command got that far and failed with ConnectError.
    env = {**cli_environment(tmp_path / "prefect"), "PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"}
    done = run_pbg(env, tmp_path, "serve", "--config-url", "htp://host/config.json")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "pbg serve: error: --config-url 'htp://host/config.json': unknown URL scheme 'htp'; "
        "give a local path or a file://, s3:// or gs:// URL"
    ]
