"""storage.trained.sources: what a model loads from, and the one-line refusals of what it cannot load from.

Loading from each source end to end is tests/storage/trained/test_model.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from disk_state import changes, tree_state
from run_trees import plant_run, run_name
from small_models import committed, graph_edges, imported, raw_config
from store_io import StorePath

from pbg_core.config import parse_config
from pbg_core.errors import ConfigError, UsageError
from storage.errors import DataNotFound
from storage.trained.sources import resolve_config


def test_each_source_gives_the_config_pointed_at_its_checkpoint(tmp_path: Path) -> None:
    raw = raw_config(tmp_path, checkpoint_path=str(tmp_path / "trained"))
    config = parse_config(raw)
    imported(config, tmp_path / "edges.tsv", graph_edges())
    committed(config)
    parsed = resolve_config(config, None, (), None)
    assert parsed is config
    by_directory = resolve_config(str(tmp_path / "trained"), None, ["lr=0.5"], None)
    assert by_directory.checkpoint_path == str(tmp_path / "trained") and by_directory.lr == 0.5
    assert by_directory.entities == config.entities and by_directory.relations == config.relations
    options = {"endpoint_url": "http://127.0.0.1:9", "use_listings_cache": False}
    given = resolve_config(raw, None, (), options)
    assert given.storage_options_for_fs() == options


def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    raw = raw_config(tmp_path)
    before = tree_state(tmp_path)
    with pytest.raises(UsageError, match=r"overrides \['lr=1'\] cannot apply to a parsed ConfigSchema"):
        resolve_config(parse_config(raw), None, ["lr=1"], None)
    with pytest.raises(DataNotFound) as caught:
        resolve_config(str(tmp_path / "nowhere"), None, (), None)
    assert str(caught.value) == (
        f"{tmp_path / 'nowhere'}: does not exist; give a config file (.json, .yaml, .yml, .py), a checkpoint "
        "directory or a retraining root"
    )
    with pytest.raises(ConfigError, match=r"storage_options: key is set but secret is not"):
        resolve_config(raw, None, (), {"key": "AKIA-not-a-secret"})
    assert changes(before, tree_state(tmp_path)) == []


def test_a_checkpoint_directory_that_records_no_config_is_named(tmp_path: Path) -> None:
    config = parse_config(raw_config(tmp_path))
    imported(config, tmp_path / "edges.tsv", graph_edges())
    committed(config, record=False)
    (tmp_path / "ckpt" / "config.json").unlink()
    with pytest.raises(DataNotFound, match=r"ckpt: records no config for version 1 \(no config/json attribute on "):
        resolve_config(str(tmp_path / "ckpt"), None, (), None)


def test_a_retraining_root_without_a_promoted_run_is_named(tmp_path: Path) -> None:
    root = StorePath(str(tmp_path / "root"))
    plant_run(root, 5, 2)
    before = tree_state(tmp_path)
    with pytest.raises(DataNotFound) as caught:
        resolve_config(str(root), None, (), None)
    assert str(caught.value) == (
        f"{root}/latest.json: does not exist: none of the 1 retraining runs under {root} is promoted yet (their "
        f"quality gate has not passed); load a run directory itself, e.g. {root}/{run_name(5)}"
    )
    with pytest.raises(DataNotFound, match="none of the 1 retraining runs"):
        resolve_config(raw_config(tmp_path, checkpoint_path=str(root)), None, (), None)
    assert changes(before, tree_state(tmp_path)) == []
