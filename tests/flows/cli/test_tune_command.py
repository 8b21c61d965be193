"""``pbg tune`` through the real CLI: refusals are one line per problem, fast, naming the file, and change
nothing on disk; ``--help`` names every option."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from _cli import cli_environment, run_pbg
from disk_state import changes, tree_state

from storage.config_loader import load_search_space
from tasks.tune_study import close_study, open_study

ALL_NEGS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "none", "all_negs": True}]
SPACE: dict[str, Any] = {"study": "s", "params": {"lr": {"type": "float", "low": 0.01, "high": 0.5, "log": True}}}


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


def project(graph: Any, config_for: Any, root: Path, space: dict[str, Any], validated: bool = True) -> Path:
    """``config.json`` and ``space.yaml`` in ``root``."""
    fields: dict[str, Any] = {"relations": ALL_NEGS, "num_uniform_negs": 0}
    if validated:
        fields["validation"] = {"edge_path": graph.test_path}
    (root / "config.json").write_text(json.dumps(config_for(graph, root / "ckpt", **fields)))
    (root / "space.yaml").write_text(yaml.safe_dump(space))
    return root


def refused(done: subprocess.CompletedProcess[str], code: int = 1) -> list[str]:
    """The refusal's lines (stderr), once it is known to be one without a traceback."""
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    return done.stderr.strip().splitlines()


def test_a_space_that_does_not_fit_is_refused_one_line_per_problem(
    graph: Any, config_for: Any, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    space = {
        "params": {
            "lrr": {"type": "float", "low": 0.01, "high": 0.5},
            "batch_size": {"type": "int", "low": 400, "high": 100},
            "seed": {"type": "int", "low": 0, "high": 3},
        }
    }
    root = project(graph, config_for, tmp_path, space)
    before = tree_state(tmp_path)
    lines = refused(run_pbg(cli_env, root, "tune", "config.json", "--space", "space.yaml", "--trials", "3"))
    assert lines[0] == "pbg tune: error: 3 problems with the search space in space.yaml:"
    assert lines[1].startswith("  - batch_size: ") and "low 400" in lines[1]
    assert lines[2].startswith("  - lrr: unknown field") and "'lr'" in lines[2]
    assert lines[3].startswith("  - seed: not tunable")
    assert changes(before, tree_state(tmp_path)) == []


def test_a_config_without_validation_is_refused_naming_the_field(
    graph: Any, config_for: Any, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    root = project(graph, config_for, tmp_path, SPACE, validated=False)
    before = tree_state(tmp_path)
    lines = refused(run_pbg(cli_env, root, "tune", "config.json", "--space", "space.yaml", "--trials", "3"))
    assert lines == [f"pbg tune: error: config in config.json: validation: not set; {lines[0].split('; ', 1)[1]}"]
    assert "add a validation section" in lines[0]
    assert changes(before, tree_state(tmp_path)) == []


def test_options_are_refused_before_anything_runs(
    graph: Any, config_for: Any, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    root = project(graph, config_for, tmp_path, SPACE)
    before = tree_state(tmp_path)
    remote = ["--space", "space.yaml", "--trials", "3", "--study-dir", "s3://bucket/study"]
    (line,) = refused(run_pbg(cli_env, root, "tune", "config.json", *remote), code=2)
    assert line == "pbg tune: error: --study-dir s3://bucket/study: must be a local directory (the study is SQLite)"
    (line,) = refused(run_pbg(cli_env, root, "tune", "config.json", "--space", "space.yaml", "--trials", "0"), code=2)
    assert line.startswith("pbg tune: error: argument --trials: ")
    (line,) = refused(run_pbg(cli_env, root, "tune", "config.json", "--space", "nope.yaml", "--trials", "2"))
    assert line.startswith("pbg tune: ") and "nope.yaml" in line
    assert changes(before, tree_state(tmp_path)) == []


def test_a_resumed_study_given_another_space_is_refused_naming_the_first_change(
    graph: Any, config_for: Any, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    root = project(graph, config_for, tmp_path, SPACE)
    close_study(open_study.fn(load_search_space(str(root / "space.yaml")), str(root / "study"), "space.yaml"))
    changed = json.loads(json.dumps(SPACE))
    changed["params"]["lr"]["high"] = 0.9
    (root / "space.yaml").write_text(yaml.safe_dump(changed))
    before = tree_state(tmp_path)
    args = ["tune", "config.json", "--space", "space.yaml", "--trials", "2", "--study-dir", "study"]
    (line,) = refused(run_pbg(cli_env, root, *args))  # before the server starts: from the kept space.json
    assert line.startswith(
        "pbg tune: error: search space in space.yaml: params.lr.high: 0.5 -> 0.9: the study was started"
    )
    assert changes(before, tree_state(tmp_path)) == []


def test_help_names_every_option(tmp_path: Path, cli_env: dict[str, str]) -> None:
    done = run_pbg(cli_env, tmp_path, "tune", "--help")
    assert done.returncode == 0
    for option in ("--space", "--trials", "--parallel", "--timeout", "--study-dir", "--dask-address", "-p"):
        assert option in done.stdout
