"""Tests for storage.config_loader: .py (PBG), JSON and YAML configs and search-space files, errors naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from disk_state import changes, tree_state
from store_io import StorePath

from pbg_core.config import config_to_json, parse_config
from pbg_core.config.search_space import parse_space
from pbg_core.errors import ConfigError, SearchSpaceError
from storage.config_loader import dump_config_json, load_config, load_search_space
from storage.errors import DataNotFound

KEY, SECRET = "AKIAPLANTEDLOADER", "planted-loader-s3cr3t"

# Shaped like PBG's torchbiggraph/examples/configs/fb15k_config_cpu.py (its explicit keys).
PBG_CONFIG = """
def get_torchbiggraph_config():
    config = dict(
        entity_path="data/FB15k",
        edge_paths=["data/FB15k/train_partitioned", "data/FB15k/valid_partitioned"],
        checkpoint_path="model/fb15k",
        entities={"all": {"num_partitions": 1}},
        relations=[
            {"name": "all_edges", "lhs": "all", "rhs": "all", "operator": "complex_diagonal"}
        ],
        dynamic_relations=True,
        dimension=400,
        global_emb=False,
        comparator="dot",
        num_epochs=50,
        num_uniform_negs=1000,
        loss_fn="softmax",
        lr=0.1,
        regularization_coef=1e-3,
        eval_fraction=0,
    )
    return config
"""

RAW = {
    "entity_path": "data/ents",
    "edge_paths": ["data/edges"],
    "checkpoint_path": "model",
    "entities": {"user": {"num_partitions": 2}},
    "relations": [{"name": "follow", "lhs": "user", "rhs": "user"}],
    "dimension": 16,
    "numEpochs": 3,
}


def write(path: Path | StorePath, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_python_pbg_config(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "fb15k.py", PBG_CONFIG), overrides=["num_epochs=2"])
    assert config.dimension == 400 and config.num_epochs == 2
    assert config.relations[0].operator == "complex_diagonal"
    assert config.dynamic_relations and config.eval_fraction == 0
    assert config.batch_size == 1000  # PBG default kept


def test_python_config_file_url(tmp_path: Path) -> None:
    path = write(tmp_path / "fb15k.py", PBG_CONFIG)
    assert load_config(f"file://{path}").dimension == 400


def test_python_config_without_function(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.py", "CONFIG = {}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == path
    assert info.value.problems == ["the file does not define get_torchbiggraph_config()"]


def test_python_config_function_raises(tmp_path: Path) -> None:
    path = write(tmp_path / "boom.py", "def get_torchbiggraph_config():\n    raise KeyError('dim')\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.problems == ["get_torchbiggraph_config() raised KeyError: 'dim'"]
    assert path in str(info.value)


def test_python_config_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path / "syntax.py", "def get_torchbiggraph_config(:\n")
    with pytest.raises(ConfigError, match="executing the config file raised SyntaxError"):
        load_config(path)


def test_remote_python_config_refused() -> None:
    with pytest.raises(ConfigError, match=r"must be a local file, not a s3:// URL"):
        load_config("s3://bucket/config.py")


def test_json_config(root: StorePath) -> None:
    config = load_config(write(root / "c.json", json.dumps(RAW)), overrides=["relations.0.all_negs=yes"])
    assert config.num_epochs == 3 and config.entities["user"].num_partitions == 2
    assert config.relations[0].all_negs is True


def test_yaml_config(root: StorePath) -> None:
    for suffix in ("yaml", "yml"):
        config = load_config(write(root / f"c.{suffix}", yaml.safe_dump(RAW)))
        assert config == parse_config(RAW)


def test_invalid_config_lists_problems_with_source(root: StorePath) -> None:
    path = write(root / "bad.yaml", yaml.safe_dump({**RAW, "lr": -1, "loss_fn": "hinge"}))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.source == path
    assert sorted(info.value.problems) == [
        "loss_fn: 'hinge' is not one of ranking, logistic, softmax",
        "lr: -1 must be >= 0",
    ]


def test_unparsable_json_and_yaml(root: StorePath) -> None:
    with pytest.raises(ConfigError, match="not valid JSON: Expecting .* at line 1, column 2"):
        load_config(write(root / "broken.json", "{dimension: 3}"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(root / "broken.yaml", "a: [1, 2\n"))


def test_yaml_top_level_not_a_mapping(root: StorePath) -> None:
    with pytest.raises(ConfigError, match="expected a mapping of field names, got list"):
        load_config(write(root / "list.yaml", "- 1\n- 2\n"))


@pytest.mark.parametrize("name", ["missing.json", "missing.yaml", "missing.py"])
def test_missing_file_names_it(tmp_path: Path, name: str) -> None:
    path = str(tmp_path / name)
    with pytest.raises(DataNotFound) as info:
        load_config(path)
    assert path in str(info.value)


def test_unsupported_suffix(root: StorePath) -> None:
    with pytest.raises(ConfigError, match=r"unsupported config file type '.toml'; allowed: .py, .json"):
        load_config(str(root / "c.toml"))


def test_dump_config_json_round_trips(root: StorePath) -> None:
    config = parse_config(RAW)
    text = dump_config_json(config)
    assert text.startswith('{\n    "entities": {')  # indent 4, like PBG's config.json
    assert json.loads(text) == config_to_json(config)
    assert load_config(write(root / "config.json", text)) == config


@pytest.mark.parametrize("name", ["missing.json", "missing.yaml"])
def test_missing_remote_or_local_file_names_it(root: StorePath, name: str) -> None:
    path = str(root / name)
    with pytest.raises(DataNotFound) as info:
        load_config(path)
    assert path in str(info.value)


def test_python_config_from_s3_is_refused_before_any_read(s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/configs/fb15k.py"
    StorePath(url).write_text(PBG_CONFIG)
    with pytest.raises(ConfigError, match=r"must be a local file, not a s3:// URL"):
        load_config(url)


def test_saved_config_json_as_the_config_file_sends_no_mask(make_config: Any, write_config: Any) -> None:
    # config.json masks credentials; reading it back must not send the mask as a credential.
    saved = config_to_json(parse_config(make_config(storage_options={"key": KEY, "secret": SECRET})))
    path: Path = write_config(saved, "saved.json")
    assert load_config(str(path)).storage_options_for_fs() == {}
    with_override = load_config(str(path), ["storage_options.key=K", "storage_options.secret=S"])
    assert with_override.storage_options_for_fs() == {"key": "K", "secret": "S"}


# --- search-space files (pbg_core.config.search_space) ---

SPACE = {
    "metric": "mrr",
    "params": {
        "lr": {"type": "float", "low": 0.01, "high": 0.5, "log": True},
        "loss_fn": {"type": "categorical", "choices": ["softmax", "logistic"]},
    },
}


def test_search_space_yaml_and_json(root: StorePath) -> None:
    expected = parse_space(SPACE, "kin.yaml")
    assert load_search_space(write(root / "kin.yaml", yaml.safe_dump(SPACE))) == expected
    assert load_search_space(write(root / "kin.yml", yaml.safe_dump(SPACE))) == expected
    assert load_search_space(write(root / "kin.json", json.dumps(SPACE))) == expected  # study: the file's stem


def test_yaml_reads_an_exponent_without_a_dot_as_a_number(root: StorePath) -> None:
    # PyYAML alone (YAML 1.1) reads 1e-4 as the string "1e-4"; YAML 1.2 and JSON read a number.
    text = "params:\n  lr: {type: float, low: 1e-4, high: 5E-1, log: true}\n  batch_size: {type: int, low: 500, high: 2_000}\n"
    space = load_search_space(write(root / "kin.yaml", text))
    assert (space.params["lr"].low, space.params["lr"].high) == (1e-4, 0.5)
    assert (space.params["batch_size"].low, space.params["batch_size"].high) == (500, 2000)
    config = load_config(
        write(
            root / "c.yaml",
            "entities: {all: {num_partitions: 1}}\nrelations: [{name: r, lhs: all, rhs: all}]\nentity_path: e\nedge_paths: [x]\ncheckpoint_path: c\ndimension: 10\nlr: 1e-3\n",
        )
    )
    assert config.lr == 1e-3


def test_search_space_file_url(tmp_path: Path) -> None:
    path = write(tmp_path / "kin.yaml", yaml.safe_dump(SPACE))
    assert load_search_space(f"file://{path}").study == "kin"


def test_search_space_problems_name_the_file_and_change_nothing(root: StorePath) -> None:
    bad = {"params": {"lr": {"type": "float", "low": 0.5}, "dimension": {"type": "int", "lo": 8, "high": 64}}}
    path = write(root / "bad.yaml", yaml.safe_dump(bad))
    before = tree_state(str(root))
    with pytest.raises(SearchSpaceError) as info:
        load_search_space(path)
    assert str(info.value).splitlines() == [
        f"3 problems with the search space in {path}:",
        "  - params.dimension.low: required key is missing",  # safe_dump sorts the keys
        "  - params.dimension.lo: unknown key (did you mean 'low'?)",
        "  - params.lr.high: required key is missing",
    ]
    assert changes(before, tree_state(str(root))) == []


def test_search_space_unparsable_unsupported_or_missing(root: StorePath) -> None:
    with pytest.raises(SearchSpaceError, match=r"search space in .*broken.json: not valid JSON: Expecting"):
        load_search_space(write(root / "broken.json", "{params: 1}"))
    with pytest.raises(SearchSpaceError, match=r"search space in .*broken.yaml: not valid YAML"):
        load_search_space(write(root / "broken.yaml", "params: [1, 2\n"))
    with pytest.raises(SearchSpaceError, match=r"unsupported file type '.py'; allowed: .json, .yaml, .yml"):
        load_search_space(str(root / "space.py"))
    missing = str(root / "missing.yaml")
    with pytest.raises(DataNotFound) as info:
        load_search_space(missing)
    assert missing in str(info.value)
