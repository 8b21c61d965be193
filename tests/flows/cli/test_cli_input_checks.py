"""``pbg`` on inputs that used to surprise: each one now exits 1 with one line naming what is wrong.

Each case runs the console script in a subprocess, as users do. Import and export start no
Prefect server (a few seconds each); the train case pays one ephemeral server start.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _cli import cli_environment, run_pbg

from bench.lib.s3_server import free_port


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect_home"))


def error_line(done: subprocess.CompletedProcess[str], command: str, flow: bool = False) -> str:
    """The command's one error line, after checking the exit code and that no traceback was printed.

    ``flow`` marks commands that run a flow (train, eval): Prefect's log of a failed run keeps
    its traceback in the API, never on the console.
    """
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stdout + done.stderr, (flow, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.startswith(f"pbg {command}: error: ")]
    assert len(lines) == 1, done.stderr
    return lines[0].removeprefix(f"pbg {command}: error: ")


def config_file(root: Path, config: dict[str, Any], name: str = "config.json") -> str:
    (root / name).write_text(json.dumps(config))
    return name


def small_config(**overrides: Any) -> dict[str, Any]:
    config = {
        "entity_path": "data",
        "edge_paths": ["data/train"],
        "checkpoint_path": "model",
        "entities": {"node": {"num_partitions": 1}},
        "relations": [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "diagonal"}],
        "dimension": 8,
        "num_epochs": 1,
        "workers": 1,
        "seed": 0,
    }
    return {**config, **overrides}


IMPORT_COLUMNS = ("--lhs-col", "0", "--rel-col", "1", "--rhs-col", "2")


def test_import_of_a_directory_says_it_is_a_directory(cli_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "edges").mkdir()
    (tmp_path / "edges" / "part-0.tsv").write_text("a\tlinked\tb\n")
    done = run_pbg(cli_env, tmp_path, "import", config_file(tmp_path, small_config()), "edges", *IMPORT_COLUMNS)
    assert error_line(done, "import") == (
        "edges: input edge list is a directory, expected a file (delimited text, .gz, .bz2 or .parquet/.pq)"
    )


def test_import_whose_every_edge_is_skipped_fails_and_keeps_the_previous_import(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    config = config_file(tmp_path, small_config())
    (tmp_path / "good.tsv").write_text("a\tlinked\tb\nb\tlinked\tc\n")
    assert run_pbg(cli_env, tmp_path, "import", config, "good.tsv", *IMPORT_COLUMNS).returncode == 0
    names = (tmp_path / "data" / "entity_names_node_0.json").read_text()
    (tmp_path / "typo.tsv").write_text("a\tlinkd\tb\nb\tlinkd\tc\nc\tfollows\ta\n")
    done = run_pbg(cli_env, tmp_path, "import", config, "typo.tsv", *IMPORT_COLUMNS)
    assert error_line(done, "import") == (
        "typo.tsv: read 3 edges and every one was skipped (3 skipped: relation name not in the config (seen: "
        "'linkd' (2), 'follows' (1); the config has 'linked')); nothing was written (the output of an earlier "
        "import, if any, is kept)"
    )
    assert (tmp_path / "data" / "entity_names_node_0.json").read_text() == names
    again = run_pbg(cli_env, tmp_path, "import", config, "good.tsv", *IMPORT_COLUMNS)
    assert again.returncode == 0 and "nothing to do" in again.stdout  # the manifest survived the failure


def test_import_from_a_stopped_s3_server_is_one_line(cli_env: dict[str, str], tmp_path: Path, s3_server: Any) -> None:
    env = {**cli_env, **s3_server.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}  # nothing there
    config = config_file(tmp_path, small_config(entity_path="s3://pbg-down/data", edge_paths=["s3://pbg-down/train"]))
    (tmp_path / "good.tsv").write_text("a\tlinked\tb\n")
    for source in ("good.tsv", "s3://pbg-down/edges.tsv"):  # an S3 input used to end in a raw traceback
        done = run_pbg(env, tmp_path, "import", config, source, *IMPORT_COLUMNS)
        line = error_line(done, "import")
        assert line.startswith("s3://pbg-down/") and "connection refused by the S3 endpoint 127.0.0.1:" in line


@pytest.fixture(scope="module")
def exportable(trained: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory whose config.json names the session's trained checkpoint."""
    root = tmp_path_factory.mktemp("export")
    config_file(root, trained.config)
    return root


def test_export_of_a_missing_version_names_the_versions_and_creates_nothing(
    cli_env: dict[str, str], exportable: Path, trained: Any
) -> None:
    done = run_pbg(
        cli_env, exportable, "export", "config.json", "--format", "tsv", "--output", "out7", "--version", "7"
    )
    assert error_line(done, "export") == (
        f"{trained.config['checkpoint_path']}: no checkpoint version 7 to "
        "export; versions present: 3 (latest committed: 3)"
    )
    assert not (exportable / "out7").exists()


def test_export_of_an_unknown_entity_type_lists_the_known_ones(cli_env: dict[str, str], exportable: Path) -> None:
    done = run_pbg(
        cli_env, exportable, "export", "config.json", "--format", "npy", "--output", "out", "--entity-type", "nodes"
    )
    assert error_line(done, "export") == "entity types to export must be some of ['node'], got ['nodes']"
    assert not (exportable / "out").exists()


def test_export_into_a_folder_that_cannot_be_made_names_it(cli_env: dict[str, str], exportable: Path) -> None:
    done = run_pbg(cli_env, exportable, "export", "config.json", "--format", "tsv", "--output", "config.json/out")
    assert error_line(done, "export").endswith(
        f"cannot create directory {exportable}/config.json/out: part of that path is a file"
    )


def test_train_with_a_missing_init_path_names_it(cli_env: dict[str, str], graph: Any, tmp_path: Path) -> None:
    config = small_config(entity_path=graph.entity_path, edge_paths=[graph.train_path], init_path="no-such-run")
    done = run_pbg(cli_env, tmp_path, "train", config_file(tmp_path, config))
    # Found before the server starts (flows.cli.preflight); the flow's own check says the same for deployed runs.
    assert error_line(done, "train", flow=True).startswith("no-such-run: init_path does not exist")
    assert not (tmp_path / "model" / "checkpoint_version.txt").exists()


def test_a_boolean_for_a_number_is_refused(cli_env: dict[str, str], tmp_path: Path) -> None:
    done = run_pbg(
        cli_env,
        tmp_path,
        "export",
        config_file(tmp_path, small_config(dimension=True)),
        "--format",
        "tsv",
        "--output",
        "out",
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "dimension: True: expected an integer, got a boolean" in done.stderr


@pytest.mark.slow
def test_eval_with_nothing_listening_on_the_s3_endpoint_fails_without_retries(
    cli_env: dict[str, str], tmp_path: Path, s3_server: Any
) -> None:
    """It used to fail after ~48 s: botocore's 5 attempts per request, then 3 task retries."""
    env = {**cli_env, **s3_server.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}  # nothing there
    config = small_config(
        entity_path="s3://pbg-down/data", edge_paths=["s3://pbg-down/test"], checkpoint_path="s3://pbg-down/model"
    )
    done = run_pbg(env, tmp_path, "eval", config_file(tmp_path, config))
    line = error_line(done, "eval", flow=True)
    assert line.startswith("s3://pbg-down/") and "connection refused by the S3 endpoint 127.0.0.1:" in line
    assert "Retry 1/" not in done.stderr + done.stdout  # no Prefect task retry
