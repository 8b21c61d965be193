"""``kill -9`` of a real ``pbg import``: the next import finds what it left and recovers a whole import.

The killed command is held at a named moment with ``PBG_PAUSE_AT`` (storage.pause_points) and
killed there with SIGKILL: while it holds its lease, with everything staged, in the middle of its
commit (after its first edge file moved in; after its first entity file replaced, the old one in a
backup), and after its manifest recorded it. The next import is paused right after it cleaned up,
and the data then must be the previous import or the new one, byte for byte (the manifest by
generations: its times differ); its spill directory is gone too. Then it runs to the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from _cli import PBG, cli_environment, run_pbg
from disk_state import tree_state

IMPORT = ["-l", "0", "-r", "1"]
APPEND = ["import", "config.json", "day1.tsv", *IMPORT, "--append", "-p", 'edge_paths=["edges/day1"]']
MANIFEST = "data/import_manifest.json"


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return cli_environment(tmp_path_factory.mktemp("prefect-home"))


def project(root: Path) -> Path:
    """day0 imported into 2 partitions; day1 (new names and old ones) waits to be appended."""
    root.mkdir()
    config = {
        "entities": {"user": {"num_partitions": 2}},
        "relations": [{"name": "follows", "lhs": "user", "rhs": "user"}],
        "dimension": 8,
        "entity_path": "data",
        "edge_paths": ["edges/day0"],
        "checkpoint_path": "ckpt",
        "seed": 0,
    }
    (root / "config.json").write_text(json.dumps(config))
    (root / "day0.tsv").write_text("".join(f"u{i}\tu{(i * 7 + 3) % 300}\n" for i in range(300)))
    (root / "day1.tsv").write_text("".join(f"u{i}\tv{i % 90}\n" for i in range(0, 300, 2)))
    (root / "spill").mkdir()
    return root


def data_state(root: Path) -> tuple[dict[str, tuple[int, str]], int]:
    """Every file of the import but the manifest and the lease (of the import running), byte for byte;
    and the manifest's generations (-1: no manifest)."""
    files = {f"{d}/{k}": v for d in ("data", "edges") for k, v in tree_state(root / d).items()}
    files.pop("data/import_lease.json", None)
    manifest = files.pop(MANIFEST, None)
    generations = len(json.loads((root / MANIFEST).read_text()).get("generations") or [0]) if manifest else -1
    return files, generations


def run_until(env: dict[str, str], cwd: Path, point: str, args: list[str]) -> subprocess.Popen[str]:
    """``pbg ARGS`` held at ``point`` (returns once it is there)."""
    flag = cwd / "paused"
    env = {**env, "PBG_PAUSE_AT": point, "PBG_PAUSE_FILE": str(flag), "TMPDIR": str(cwd / "spill")}
    process = subprocess.Popen(
        [PBG, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while not flag.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"pbg {' '.join(args)} never reached {point}: {process.communicate()}")
        time.sleep(0.02)
    return process


@pytest.fixture(scope="module")
def states(cli_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[object, int]]:
    """The data before the append ("old") and after a clean one ("new")."""
    root = project(tmp_path_factory.mktemp("reference") / "project")
    assert run_pbg(cli_env, root, "import", "config.json", "day0.tsv", *IMPORT).returncode == 0
    old = data_state(root)
    done = run_pbg(cli_env, root, *APPEND)
    assert done.returncode == 0, done.stderr
    return {"old": old, "new": data_state(root)}


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        ("import-lease-held", "old"),
        ("import-staged", "old"),
        ("import-move:2", "old"),  # two of four edge files moved in: taken out again
        ("import-move:6", "old"),  # the first entity file replaced (its old copy in a backup): put back
        ("import-recorded", "new"),  # the manifest recorded it: only the staging and backups go
    ],
)
def test_an_append_killed_at_any_moment_is_undone_or_finished_by_the_next_import(
    cli_env: dict[str, str], tmp_path: Path, states: dict[str, tuple[object, int]], moment: str, expected: str
) -> None:
    root = project(tmp_path / "project")
    assert run_pbg(cli_env, root, "import", "config.json", "day0.tsv", *IMPORT).returncode == 0
    assert data_state(root) == states["old"]
    killed = run_until(cli_env, root, moment, APPEND)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    (root / "paused").unlink()
    if moment != "import-lease-held":  # pass 1 is over: its spill is there
        assert list((root / "spill").iterdir()), "the killed import left no spill: the test would prove nothing"

    rerun = run_until(cli_env, root, "import-lease-held", APPEND)  # paused right after its clean-up
    try:
        assert data_state(root) == states[expected]
        assert not [p for p in root.rglob(".pbg-import-*")], "leftovers of the killed import"
        assert list((root / "spill").iterdir()) == []  # the rerun spills only after this point
    finally:
        (root / "paused").unlink()
        err = rerun.communicate(timeout=300)[1]
    assert rerun.returncode == 0, err
    if moment != "import-lease-held":
        assert "cleaned up what interrupted imports left:" in err and " freed)" in err
    assert data_state(root) == states["new"]


def test_a_plain_import_killed_while_committing_is_finished(cli_env: dict[str, str], tmp_path: Path) -> None:
    """A plain import cannot go back (it replaces files without backups): the next import completes
    its moves, so the data is the new import, whole; it deleted its manifest, so it imports again."""
    reference = project(tmp_path / "reference")
    shutil.copy(reference / "day1.tsv", reference / "day0.tsv")
    assert run_pbg(cli_env, reference, "import", "config.json", "day0.tsv", *IMPORT).returncode == 0
    new, _ = data_state(reference)

    root = project(tmp_path / "project")
    assert run_pbg(cli_env, root, "import", "config.json", "day0.tsv", *IMPORT).returncode == 0
    shutil.copy(root / "day1.tsv", root / "day0.tsv")  # changed content: imported again
    killed = run_until(cli_env, root, "import-move:3", ["import", "config.json", "day0.tsv", *IMPORT])
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    (root / "paused").unlink()
    rerun = run_until(cli_env, root, "import-lease-held", ["import", "config.json", "day0.tsv", *IMPORT])
    try:
        assert data_state(root) == (new, -1)  # whole, and no manifest
        assert not [p for p in root.rglob(".pbg-import-*")]
    finally:
        (root / "paused").unlink()
        rerun.communicate(timeout=300)
    assert rerun.returncode == 0 and data_state(root)[0] == new
    assert os.path.exists(root / MANIFEST)
