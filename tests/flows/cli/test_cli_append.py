"""``pbg import --append``: the command line of an appending import, and its refusals as one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _cli import cli_environment, run_pbg


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


def write_config(root: Path, partitions: int, edge_path: str) -> None:
    config: dict[str, Any] = {
        "entities": {"user": {"num_partitions": partitions}},
        "relations": [{"name": "follows", "lhs": "user", "rhs": "user"}],
        "dimension": 8,
        "entity_path": "data",
        "edge_paths": [edge_path],
        "checkpoint_path": "ckpt",
    }
    (root / "config.json").write_text(json.dumps(config))


def test_an_append_from_the_command_line_reports_its_generation_and_keeps_old_names(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "day0.tsv").write_text("".join(f"u{i}\tu{i + 1}\n" for i in range(40)))
    (tmp_path / "day1.tsv").write_text("u0\tnew1\nnew1\tnew2\n")
    write_config(tmp_path, 2, "edges/day0")
    assert run_pbg(cli_env, tmp_path, "import", "config.json", "day0.tsv", "-l", "0", "-r", "1").returncode == 0
    before = [json.loads((tmp_path / "data" / f"entity_names_user_{p}.json").read_text()) for p in range(2)]
    write_config(tmp_path, 2, "edges/day1")
    done = run_pbg(cli_env, tmp_path, "import", "config.json", "day1.tsv", "-l", "0", "-r", "1", "--append")
    assert done.returncode == 0, done.stderr
    assert "appended as generation 1; new entities user: 2" in done.stdout
    after = [json.loads((tmp_path / "data" / f"entity_names_user_{p}.json").read_text()) for p in range(2)]
    assert [a[: len(b)] for a, b in zip(after, before, strict=True)] == before
    again = run_pbg(cli_env, tmp_path, "import", "config.json", "day1.tsv", "-l", "0", "-r", "1", "--append")
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_an_append_with_another_partition_count_is_one_line_and_changes_nothing(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "day0.tsv").write_text("a\tb\nb\tc\n")
    write_config(tmp_path, 2, "edges/day0")
    assert run_pbg(cli_env, tmp_path, "import", "config.json", "day0.tsv", "-l", "0", "-r", "1").returncode == 0
    files = {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir() if p.is_file()}
    write_config(tmp_path, 4, "edges/day1")
    done = run_pbg(cli_env, tmp_path, "import", "config.json", "day0.tsv", "-l", "0", "-r", "1", "--append")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "entities.user: the import being appended to has 2 partition(s), the config says 4" in done.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir() if p.is_file()} == files


def test_an_append_onto_the_training_edges_is_one_line_and_changes_nothing(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The reported case: an append without a new edge_paths rewrote the training edges (5,216 -> 60)."""
    from disk_state import changes, tree_state

    (tmp_path / "day0.tsv").write_text("".join(f"u{i}\tu{(i * 7) % 50}\n" for i in range(50)))
    (tmp_path / "day1.tsv").write_text("u0\tnew1\nnew1\tnew2\n")
    write_config(tmp_path, 2, "edges/train")
    assert run_pbg(cli_env, tmp_path, "import", "config.json", "day0.tsv", "-l", "0", "-r", "1").returncode == 0
    before = tree_state(tmp_path)
    done = run_pbg(cli_env, tmp_path, "import", "config.json", "day1.tsv", "-l", "0", "-r", "1", "--append")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "pbg import: error: edges/train: already holds 50 edges, written by generation 0 (the import, imported "
        + json.loads((tmp_path / "data" / "import_manifest.json").read_text())["imported_at"]
        + "); an append never replaces them. Give the append new edge paths (-p 'edge_paths=[\"...\"]'), "
        "or --force to replace these edges"
    ]
    assert changes(before, tree_state(tmp_path)) == []
    forced = run_pbg(
        cli_env, tmp_path, "import", "config.json", "day1.tsv", "-l", "0", "-r", "1", "--append", "--force"
    )
    assert forced.returncode == 0, forced.stderr
    assert "imported 2 of 2 edges" in forced.stdout
    assert (
        "replaced, with --force, the edges of earlier generations at: edges/train (50 edges of generation 0)"
        in forced.stdout
    )
