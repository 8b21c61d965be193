"""The best version through the real ``pbg`` commands: ``--version best`` of eval and export, the
refusals (one line, nothing written), and a training run killed at each step around its commit
(SIGKILL at a pause point, storage.pause_points): the rerun reconciles best.json from
validation.json and ends where an uninterrupted run ends, its best version and rows intact.

The tests that train through the CLI are slow: run by `make test-long`, or with ``PBG_SLOW_TESTS=1``;
the default run covers ``--version best`` in-process (tests/flows/test_train_validation.py) and the
parser (tests/flows/cli/test_parser.py), and the config refusals here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from _cli import PBG, cli_environment, run_pbg
from disk_state import changes, tree_state

from storage.best_version import read_best
from storage.validation_log import ValidationLog

slow = pytest.mark.slow
ALL_NEGS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "none", "all_negs": True}]


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


def write_project(graph: Any, config_for: Any, root: Path, **fields: Any) -> Path:
    """``config.json`` in ``root``: the planted graph validated every epoch on its test edges."""
    root.mkdir(parents=True, exist_ok=True)
    base = {"relations": ALL_NEGS, "num_uniform_negs": 0, "validation": {"edge_path": graph.test_path}}
    config = config_for(graph, root / "ckpt", **(base | fields))
    (root / "config.json").write_text(json.dumps(config))
    return root / "ckpt"


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout, done.stderr
    return done.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def trained_best(
    graph: Any, config_for: Any, cli_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    root = tmp_path_factory.mktemp("best")
    checkpoint = write_project(graph, config_for, root, num_epochs=3)
    done = run_pbg(cli_env, root, "train", "config.json")
    assert done.returncode == 0, done.stderr
    return checkpoint


@slow  # a real `pbg train` (with a fresh PREFECT_HOME) and real `pbg` commands: 20-45 s
def test_eval_version_best_ranks_the_best_version(trained_best: Path, graph: Any, cli_env: dict[str, str]) -> None:
    root = trained_best.parent
    best = read_best(str(trained_best))
    assert best is not None
    filters = ["--filtered", "--filter-path", graph.train_path, "--filter-path", graph.test_path]
    edges = ["-p", f'edge_paths=["{graph.test_path}"]']
    done = run_pbg(cli_env, root, "eval", "config.json", *edges, *filters, "--version", "best", "--json")
    assert done.returncode == 0, done.stderr
    metrics = json.loads(done.stdout.strip().splitlines()[-1])
    assert metrics["mrr"] == best.row.mrr and metrics["count"] == best.row.count


@slow  # a real `pbg train` (with a fresh PREFECT_HOME) and real `pbg` commands: 20-45 s
def test_export_version_best_exports_the_best_version(trained_best: Path, cli_env: dict[str, str]) -> None:
    root = trained_best.parent
    best = read_best(str(trained_best))
    assert best is not None
    done = run_pbg(cli_env, root, "export", "config.json", "--format", "npy", "--output", "out", "--version", "best")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"exported version {best.version}:")


@slow  # a real `pbg train` (with a fresh PREFECT_HOME) and real `pbg` commands: 20-45 s
def test_version_best_without_best_json_is_one_line(
    graph: Any, config_for: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    checkpoint = write_project(graph, config_for, tmp_path, num_epochs=1, validation=None)
    assert run_pbg(cli_env, tmp_path, "train", "config.json").returncode == 0
    before = tree_state(tmp_path)
    expected = f"{checkpoint}: no best.json here: train with a validation section first (docs/quality.md), or give a version number"
    assert (
        last_line(run_pbg(cli_env, tmp_path, "eval", "config.json", "--version", "best"))
        == f"pbg eval: error: {expected}"
    )
    export = run_pbg(
        cli_env, tmp_path, "export", "config.json", "--format", "npy", "--output", "out", "--version", "best"
    )
    assert last_line(export) == f"pbg export: error: {expected}"
    bad = run_pbg(cli_env, tmp_path, "eval", "config.json", "--version", "latest")
    assert bad.returncode == 2 and "'latest' is not allowed; give a version number >= 1 or best" in bad.stderr
    assert changes(before, tree_state(tmp_path)) == []


def test_config_refusals_are_one_line_naming_the_field(
    graph: Any, config_for: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    write_project(graph, config_for, tmp_path, num_epochs=1, early_stopping={"patience": 2})
    before = tree_state(tmp_path)
    cases = {
        ("-p", "validation=null"): "early_stopping: needs a validation section (validation.edge_path)",
        ("-p", "validation.every_epochs=0"): "validation.every_epochs:",
        ("-p", f"validation.edge_path={tmp_path / 'nowhere'}"): "file does not exist (validation.edge_path; give",
    }
    for override, expected in cases.items():
        line = last_line(run_pbg(cli_env, tmp_path, "train", "config.json", *override))
        assert line.startswith("pbg train: error: ") and expected in line, (override, line)
    assert changes(before, tree_state(tmp_path)) == []


def run_until(env: dict[str, str], cwd: Path, point: str, args: list[str]) -> subprocess.Popen[str]:
    """``pbg ARGS`` held at the pause point ``point`` (returns once it is there), in its own process group."""
    flag = cwd / "paused"
    env = {**env, "PBG_PAUSE_AT": point, "PBG_PAUSE_FILE": str(flag)}
    process = subprocess.Popen(
        [PBG, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while not flag.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"pbg {' '.join(args)} never reached {point}: {process.communicate()}")
        time.sleep(0.02)
    return process


def outcome(checkpoint: Path) -> tuple[list[tuple[int, int, float]], int | None, list[str]]:
    """The rows (version, epoch, mrr), the best version, and the versioned files on disk."""
    rows = [(r.version, r.epoch, r.mrr) for r in ValidationLog(str(checkpoint)).read()]
    best = read_best(str(checkpoint))
    files = sorted(p.name for p in checkpoint.glob("*.v*.h5"))
    return rows, best.version if best is not None else None, files


@slow  # a reference run, three killed runs and their reruns, each a real `pbg train` (about 100 s in all)
@pytest.mark.parametrize("moment", ["validation-row-written:2", "validation-committed:2", "validation-best-recorded:2"])
def test_a_run_killed_around_a_validation_ends_as_an_uninterrupted_one(
    graph: Any, config_for: Any, cli_env: dict[str, str], tmp_path: Path, moment: str
) -> None:
    reference = write_project(graph, config_for, tmp_path / "reference", num_epochs=4)
    assert run_pbg(cli_env, reference.parent, "train", "config.json").returncode == 0
    expected = outcome(reference)
    assert expected[1] is not None and len(expected[0]) == 4

    checkpoint = write_project(graph, config_for, tmp_path / "killed", num_epochs=4)
    root = checkpoint.parent
    killed = run_until(cli_env, root, moment, ["train", "config.json"])
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    (root / "paused").unlink()
    committed = int((checkpoint / "checkpoint_version.txt").read_text())
    best = read_best(str(checkpoint))
    if best is not None:  # the pointer names a committed version whose files are all there
        assert best.version <= committed and (checkpoint / f"model.v{best.version}.h5").exists()
    rows = [r.version for r in ValidationLog(str(checkpoint)).read()]
    assert rows[:committed] == list(range(1, committed + 1)), (moment, rows, committed)  # no committed row lost

    rerun = run_pbg(cli_env, root, "train", "config.json")
    assert rerun.returncode == 0, rerun.stderr
    assert outcome(checkpoint) == expected
