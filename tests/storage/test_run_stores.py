"""open_run_stores: every store of a run gets the config's real filesystem options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from pbg_core.config import ConfigSchema, config_to_json, parse_config
from pbg_core.ports import CheckpointMetadata
from storage.fs import urls
from storage.run_stores import open_run_stores

KEY, SECRET = "AKIAPLANTEDRUN", "planted-run-s3cr3t"


def config_at(root: str, **fields: Any) -> ConfigSchema:
    return parse_config(
        {
            "entities": {"node": {"num_partitions": 1}},
            "relations": [{"name": "r", "lhs": "node", "rhs": "node"}],
            "dimension": 4,
            "entity_path": urls.join_url(root, "data"),
            "edge_paths": [urls.join_url(root, "edges1"), urls.join_url(root, "edges2")],
            "checkpoint_path": urls.join_url(root, "ckpt"),
            "init_path": urls.join_url(root, "init"),
            **fields,
        }
    )


def test_every_store_gets_the_revealed_options(tmp_path: Path) -> None:
    config = config_at(str(tmp_path), storage_options={"key": KEY, "secret": SECRET, "use_listings_cache": False})
    stores = open_run_stores(config)
    expected = {"key": KEY, "secret": SECRET, "use_listings_cache": False}
    every = [stores.entities, *stores.edges, stores.checkpoint, stores.init, stores.stats]
    assert [store.storage_options for store in every] == [expected] * 6
    filesystem, _ = urls.resolve(stores.checkpoint.url, stores.checkpoint.storage_options)
    assert filesystem.storage_options["secret"] == SECRET  # fsspec really receives it
    assert SECRET not in repr(stores)


def test_a_config_read_back_from_config_json_sends_no_mask(tmp_path: Path) -> None:
    config = config_at(str(tmp_path), storage_options={"key": KEY, "secret": SECRET})
    saved = json.loads(json.dumps(config_to_json(config)))
    stores = open_run_stores(parse_config(saved))
    assert stores.checkpoint.storage_options == {}  # the environment supplies the credentials


def test_no_storage_options_means_empty_options(tmp_path: Path) -> None:
    stores = open_run_stores(config_at(str(tmp_path)))
    assert stores.checkpoint.storage_options == {} and stores.init is not None


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No endpoint, credentials or profile from the environment: only the config can reach the server."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_s3_endpoint_and_credentials_from_storage_options(
    s3_server: Any, s3_bucket: str, no_aws_environment: None
) -> None:
    config = config_at(
        f"s3://{s3_bucket}/run",
        storage_options={
            "endpoint_url": s3_server.endpoint_url,
            "key": "config-key",
            "secret": "config-secret",
            "region": "us-east-1",
            "config_kwargs": {"connect_timeout": 2, "retries": {"max_attempts": 1}},
        },
    )
    stores = open_run_stores(config)
    stores.entities.save_count("node", 0, 7)
    stores.checkpoint.save_embeddings("node", 0, 1, torch.ones(7, 4), b"state", CheckpointMetadata(config_json="{}"))
    stores.checkpoint.write_version(1)
    assert stores.entities.load_count("node", 0) == 7
    assert stores.checkpoint.read_version() == 1
    loaded, _ = stores.checkpoint.load_embeddings("node", 0, 1)
    assert torch.equal(loaded, torch.ones(7, 4))
