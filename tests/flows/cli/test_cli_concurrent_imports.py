"""Two writers on one import, through the real CLI: the second ``pbg import`` is refused before it
writes anything, naming the first; an import and a training run never overlap on an entity_path.

The first command is held at a named point of its work with ``PBG_PAUSE_AT`` (storage.pause_points)
while the second runs, so the two overlap for certain; the files are compared byte for byte
(``tests/disk_state.py``) around every refusal. The test with ``pbg train`` (two embedded API
server start-ups) runs with ``PBG_SLOW_TESTS=1``.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from _cli import PBG, cli_environment, run_pbg
from disk_state import changes, tree_state

slow = pytest.mark.slow
IMPORT = ["-l", "0", "-r", "1"]


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


def write_config(root: Path) -> None:
    config: dict[str, Any] = {
        "entities": {"user": {"num_partitions": 2}},
        "relations": [{"name": "follows", "lhs": "user", "rhs": "user"}],
        "dimension": 8,
        "entity_path": "data",
        "edge_paths": ["edges/day0"],
        "checkpoint_path": "ckpt",
        "num_epochs": 1,
        "workers": 1,
        "eval_fraction": 0.0,
        "seed": 0,
    }
    (root / "config.json").write_text(json.dumps(config))


def write_day(root: Path, name: str, prefix: str, count: int) -> str:
    (root / name).write_text("".join(f"{prefix}{i}\t{prefix}{(i * 7 + 3) % count}\n" for i in range(count)))
    return name


class Paused:
    """A ``pbg`` command started in the background and held at ``point`` until :meth:`resume`."""

    def __init__(self, env: dict[str, str], cwd: Path, point: str, *args: str) -> None:
        self.flag = cwd / f"paused-{point}"
        # A lease renewed while the second command runs would change its file: renew hourly here.
        env = {**env, "PBG_PAUSE_AT": point, "PBG_PAUSE_FILE": str(self.flag), "PBG_LEASE_TTL_SECONDS": "3600"}
        self.process = subprocess.Popen(
            [PBG, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 300
        while not self.flag.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                out, err = self.process.communicate()
                pytest.fail(f"pbg {' '.join(args)} never reached {point}: {out}{err}")
            time.sleep(0.05)

    def resume(self) -> subprocess.CompletedProcess[str]:
        """Let it go on; its outcome."""
        self.flag.unlink()
        out, err = self.process.communicate(timeout=400)
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, out, err)


def project_state(root: Path) -> dict[str, tuple[int, str]]:
    return {f"{d}/{k}": v for d in ("data", "edges") for k, v in tree_state(root / d).items()}


def test_a_second_append_while_one_runs_is_refused_naming_it_and_changes_nothing(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    write_config(tmp_path)
    day0, day1, day2 = (write_day(tmp_path, f"day{i}.tsv", p, 30) for i, p in enumerate(("u", "a", "b")))
    assert run_pbg(cli_env, tmp_path, "import", "config.json", day0, *IMPORT).returncode == 0
    first_args = ["import", "config.json", day1, *IMPORT, "--append", "-p", 'edge_paths=["edges/day1"]']
    second_args = ["import", "config.json", day2, *IMPORT, "--append", "-p", 'edge_paths=["edges/day2"]']
    first = Paused(cli_env, tmp_path, "import-lease-held", *first_args)
    before = project_state(tmp_path)
    second = run_pbg(cli_env, tmp_path, *second_args)
    assert second.returncode == 1 and "Traceback" not in second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, second.stderr
    assert lines[0].startswith(
        "pbg import: error: data/import_lease.json: entity_path data is being imported into by run "
    )
    assert "day1.tsv -l 0 -r 1 --append" in lines[0] and f"(pid {first.process.pid} on host " in lines[0]
    assert changes(before, project_state(tmp_path)) == []

    done = first.resume()
    assert done.returncode == 0 and "appended as generation 1" in done.stdout, done.stderr
    again = run_pbg(cli_env, tmp_path, *second_args)
    assert again.returncode == 0 and "appended as generation 2" in again.stdout, again.stderr
    manifest = json.loads((tmp_path / "data" / "import_manifest.json").read_text())
    assert [g["generation"] for g in manifest["generations"]] == [0, 1, 2]
    names = {n for p in range(2) for n in json.loads((tmp_path / "data" / f"entity_names_user_{p}.json").read_text())}
    assert {f"a{i}" for i in range(30)} | {f"b{i}" for i in range(30)} <= names  # neither import's names vanished
    assert not (tmp_path / "data" / "import_lease.json").exists()


def test_a_plain_import_while_another_runs_is_refused_too(cli_env: dict[str, str], tmp_path: Path) -> None:
    write_config(tmp_path)
    day0 = write_day(tmp_path, "day0.tsv", "u", 30)
    first = Paused(cli_env, tmp_path, "import-lease-held", "import", "config.json", day0, *IMPORT)
    before = project_state(tmp_path)
    other = write_day(tmp_path, "other.tsv", "o", 20)
    second = run_pbg(cli_env, tmp_path, "import", "config.json", other, *IMPORT, "--force")
    assert second.returncode == 1 and "is being imported into by run 'pbg import config.json day0.tsv" in second.stderr
    assert changes(before, project_state(tmp_path)) == []
    assert first.resume().returncode == 0
    names = json.loads((tmp_path / "data" / "entity_names_user_0.json").read_text())
    assert names and all(n.startswith("u") for n in names)


@slow
def test_an_import_and_a_training_run_never_overlap(cli_env: dict[str, str], tmp_path: Path) -> None:
    write_config(tmp_path)
    day0, day1 = write_day(tmp_path, "day0.tsv", "u", 40), write_day(tmp_path, "day1.tsv", "a", 20)
    assert run_pbg(cli_env, tmp_path, "import", "config.json", day0, *IMPORT).returncode == 0
    append = ["import", "config.json", day1, *IMPORT, "--append", "-p", 'edge_paths=["edges/day1"]']

    importer = Paused(cli_env, tmp_path, "import-lease-held", *append)
    before = project_state(tmp_path)
    refused = run_pbg(cli_env, tmp_path, "train", "config.json")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "data: is being imported into by run 'pbg import config.json day1.tsv" in refused.stderr, refused.stderr
    assert (
        changes(before, project_state(tmp_path)) == [] and not (tmp_path / "ckpt" / "checkpoint_version.txt").exists()
    )
    assert importer.resume().returncode == 0

    trainer = Paused(cli_env, tmp_path, "train-leases-held", "train", "config.json")
    before = project_state(tmp_path)
    again = [
        "import",
        "config.json",
        write_day(tmp_path, "day2.tsv", "b", 20),
        *IMPORT,
        "--append",
        "-p",
        'edge_paths=["edges/day2"]',
    ]
    blocked = run_pbg(cli_env, tmp_path, *again)
    assert blocked.returncode == 1, blocked.stderr
    assert (
        "data: is being read by run 'train ckpt, " in blocked.stderr
        and f"(pid {trainer.process.pid} on" in blocked.stderr
    )
    assert changes(before, project_state(tmp_path)) == []
    trained = trainer.resume()
    assert trained.returncode == 0 and "is at version 1" in trained.stdout, trained.stderr
    assert run_pbg(cli_env, tmp_path, *again).returncode == 0  # the run is over: the import goes ahead
