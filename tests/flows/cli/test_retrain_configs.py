"""``pbg eval`` / ``pbg train`` on a scheduled retraining config: one line naming the pattern or the run root
and the ``-p`` overrides to give, before any server starts, nothing written."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from _cli import cli_environment, run_pbg
from disk_state import changes, tree_state

from flows.cli.retrain_configs import check_concrete_paths
from pbg_core.config import parse_config
from pbg_core.errors import ConfigError

RUN = "run-20261204T030000Z-0b9e1c2d"


def retraining_project(root: Path) -> dict[str, Any]:
    """Two generations (the first with its holdout), a promoted run, and the config that made them."""
    for name in ("gen0000-day0_partitioned", "gen0000-day0_holdout", "gen0001-day1_partitioned"):
        (root / "edges" / name).mkdir(parents=True)
        (root / "edges" / name / "edges_0_0.h5").write_bytes(b"h5")
    (root / "runs" / RUN).mkdir(parents=True)
    (root / "runs" / "latest.json").write_text(json.dumps({"run": RUN, "checkpoint_path": "elsewhere", "version": 3}))
    return {
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "linked", "lhs": "node", "rhs": "node"}],
        "dimension": 8,
        "entity_path": str(root / "data"),
        "edge_paths": [str(root / "edges" / "gen*_partitioned")],
        "checkpoint_path": str(root / "runs"),
    }


def test_eval_is_told_which_checkpoint_and_edge_paths_to_give(tmp_path: Path) -> None:
    config = parse_config(retraining_project(tmp_path))
    with pytest.raises(ConfigError) as raised:
        check_concrete_paths(config, "eval", "retrain.json")
    edges, runs = tmp_path / "edges", tmp_path / "runs"
    assert str(raised.value) == (
        f"config in retrain.json: edge_paths '{edges}/gen*_partitioned' is a glob pattern and checkpoint_path "
        f"'{runs}' is the root of retraining runs (latest.json): a scheduled retraining config "
        "(docs/retraining.md); pbg eval needs one checkpoint and concrete edge paths: give "
        f"-p checkpoint_path={runs}/{RUN} (latest.json's run) and "
        f"-p 'edge_paths=[\"{edges}/gen0000-day0_holdout\"]'; it matches {edges}/gen0000-day0_partitioned, "
        f"{edges}/gen0001-day1_partitioned, held out (never trained): {edges}/gen0000-day0_holdout"
    )


def test_train_is_told_to_give_a_checkpoint_of_its_own(tmp_path: Path) -> None:
    raw = retraining_project(tmp_path)
    with pytest.raises(ConfigError, match=r"pbg train needs concrete edge paths: give -p 'edge_paths=\[.*day0_part"):
        check_concrete_paths(parse_config({**raw, "checkpoint_path": str(tmp_path / "mine")}), "train")
    concrete = [str(tmp_path / "edges" / "gen0001-day1_partitioned")]
    with pytest.raises(ConfigError, match=r"pbg train needs one checkpoint: give -p checkpoint_path=<a directory of"):
        check_concrete_paths(parse_config({**raw, "edge_paths": concrete}), "train")
    check_concrete_paths(
        parse_config({**raw, "edge_paths": concrete, "checkpoint_path": str(tmp_path / "mine")}), "eval"
    )


def test_a_pattern_matching_nothing_or_a_remote_one_is_still_named(tmp_path: Path) -> None:
    raw = retraining_project(tmp_path)
    for pattern in (str(tmp_path / "none-*"), "s3://bucket/edges/gen*_partitioned"):
        config = parse_config({**raw, "edge_paths": [pattern], "checkpoint_path": str(tmp_path / "mine")})
        with pytest.raises(ConfigError) as raised:
            check_concrete_paths(config, "eval")
        assert str(raised.value).endswith("pbg eval needs concrete edge paths: give -p 'edge_paths=[\"...\"]'")
        assert f"edge_paths '{pattern}' is a glob pattern" in str(raised.value)


def test_pbg_eval_on_a_retraining_config_says_so_in_one_line(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "config.json").parent.mkdir()
    (project / "config.json").write_text(json.dumps(retraining_project(project)))
    before = tree_state(project)
    started = time.monotonic()
    done = run_pbg(cli_environment(tmp_path / "home"), project, "eval", "config.json")
    elapsed = time.monotonic() - started
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("pbg eval: error: ")]
    assert "is a glob pattern" in line and f"-p checkpoint_path={project / 'runs' / RUN}" in line
    assert elapsed < 20, elapsed  # before the server starts
    assert changes(before, tree_state(project)) == []
    assert not (tmp_path / "home").exists()  # no Prefect home: no server was started
