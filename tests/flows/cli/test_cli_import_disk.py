"""``pbg import`` onto a disk too small for it, through the real CLI: one line naming the path,
the bytes needed and free, no HDF5 internals, and the previous import byte for byte as it was.

The disk is a real 1 MiB tmpfs (``small_disk``: needs root to mount, skipped elsewhere).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from _cli import cli_environment, run_pbg
from disk_state import changes, tree_state


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


def test_an_import_that_does_not_fit_is_one_line_and_changes_nothing(
    cli_env: dict[str, str], tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    disk = small_disk(1 << 20)
    config = {
        "entities": {"n": {"num_partitions": 2}},
        "relations": [{"name": "r", "lhs": "n", "rhs": "n"}],
        "dimension": 8,
        "entity_path": str(disk / "data"),
        "edge_paths": [str(disk / "data" / "edges")],
        "checkpoint_path": str(tmp_path / "ckpt"),
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "small.tsv").write_text("".join(f"n{i}\tn{(i * 3) % 40}\n" for i in range(40)))
    (tmp_path / "big.tsv").write_text("".join(f"n{i % 5000}\tn{(i * 7 + 1) % 5000}\n" for i in range(60_000)))
    assert run_pbg(cli_env, tmp_path, "import", "config.json", "small.tsv", "-l", "0", "-r", "1").returncode == 0
    before = tree_state(disk)

    done = run_pbg(cli_env, tmp_path, "import", "config.json", "big.tsv", "-l", "0", "-r", "1")
    assert done.returncode == 1 and "Traceback" not in done.stderr and "HDF5" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("pbg import: error:")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(
        f"pbg import: error: {disk / 'data' / 'edges'}: not enough disk space to write the import: "
    )
    assert " needed on the filesystem of " in errors[0] and " free; nothing was written" in errors[0]
    assert changes(before, tree_state(disk)) == []
