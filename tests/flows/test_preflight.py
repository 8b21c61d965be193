"""flows.preflight: the checks ``pbg train``/``pbg eval`` make before any server or worker starts."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.preflight import (
    CheckpointNotWritable,
    PrefectApiUnreachable,
    check_local_inputs,
    check_prefect_api,
    load_checked_config,
)
from pbg_core.config import parse_config
from pbg_core.errors import ConfigError
from storage.errors import DataNotFound


@pytest.fixture(autouse=True)
def prefect_harness() -> Iterator[None]:
    """No Prefect server here (overrides the directory's session fixture): nothing runs a flow."""
    yield


@pytest.fixture
def config(graph: Any, config_for: Callable[..., dict[str, Any]], tmp_path: Path) -> dict[str, Any]:
    return config_for(graph, tmp_path / "run" / "ckpt")


def test_a_valid_config_passes_and_leaves_nothing_behind(config: dict[str, Any], tmp_path: Path) -> None:
    check_local_inputs(parse_config(config), training=True)
    assert list(tmp_path.iterdir()) == []  # no checkpoint directory, no write probe left


@pytest.mark.parametrize(
    "changes, error, words",
    [
        ({"edge_paths": []}, ConfigError, "edge_paths: [] is empty"),
        ({"edge_paths": ["{tmp}/nope"]}, DataNotFound, "edge path does not exist"),
        ({"edge_paths": ["{tmp}/file"]}, DataNotFound, "is a file, not a directory"),
        ({"entities": {"node": {"num_partitions": 2}}}, DataNotFound, "edges_0_1.h5"),
        ({"entity_path": "{tmp}/nope"}, DataNotFound, "entity_path is not a directory"),
        ({"init_path": "{tmp}/gone"}, DataNotFound, "init_path does not exist"),
        ({"checkpoint_path": "{tmp}/file/ckpt"}, CheckpointNotWritable, "is a file"),
        ({"checkpoint_path": "/proc/pbg-ckpt"}, CheckpointNotWritable, "cannot create the checkpoint directory"),
    ],
)
def test_each_missing_input_is_one_error_naming_it(
    config: dict[str, Any], tmp_path: Path, changes: dict[str, Any], error: type[Exception], words: str
) -> None:
    (tmp_path / "file").write_text("x")
    raw = json.loads(json.dumps({**config, **changes}).replace("{tmp}", str(tmp_path)))
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        check_local_inputs(parse_config(raw), training=True)


def test_eval_needs_a_committed_checkpoint_but_no_writable_one(config: dict[str, Any]) -> None:
    with pytest.raises(DataNotFound, match="no committed checkpoint to evaluate"):
        check_local_inputs(parse_config({**config, "checkpoint_path": "/proc/pbg-ckpt"}), training=False)


def test_remote_inputs_are_left_to_the_flow(config: dict[str, Any]) -> None:
    remote = {
        **config,
        "edge_paths": ["s3://bucket/none"],
        "entity_path": "s3://bucket/none",
        "checkpoint_path": "s3://bucket/ckpt",
    }
    check_local_inputs(parse_config(remote), training=True)  # no network: nothing is probed


def test_loading_imports_neither_fsspec_nor_prefect_nor_torch(config: dict[str, Any], tmp_path: Path) -> None:
    # Whatever the check imports delays the server's start: run it in a fresh interpreter.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code = (
        "import sys; from flows.preflight import load_checked_config; "
        f"load_checked_config({str(path)!r}, [], training=True); "
        "print(sorted(m for m in ('fsspec', 'prefect', 'torch', 'yaml') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"
    assert load_checked_config(str(path), ["num_epochs=7"], training=True).num_epochs == 7


def test_a_prefect_api_url_nothing_answers_is_named() -> None:
    with pytest.raises(PrefectApiUnreachable, match=r"PREFECT_API_URL=http://127.0.0.1:9/api: no Prefect API"):
        check_prefect_api("http://127.0.0.1:9/api", timeout=2)
    check_prefect_api(None)  # unset: the embedded server is used
