"""storage.importing.leftovers: what a killed import left is undone or finished, on local disk and S3.

An import killed with SIGKILL is played here by a :class:`Staging` left where it stopped (its
process keeps running, but it never calls ``rollback``/``finish`` again, as a killed one cannot);
the real kills of ``pbg import`` are in tests/flows/test_killed_imports.py.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from disk_state import tree_state
from store_io import StorePath

from storage.importing.journal import journal_tokens
from storage.importing.leftovers import claim_spill, recover, remove_dead_spills
from storage.importing.manifest import write_manifest
from storage.importing.staging import Staging
from storage.layout import IMPORT_SPILL_PREFIX as SPILL_PREFIX

REPO = Path(__file__).parents[3]


def files_under(root: StorePath) -> dict[str, str]:
    """Relative path -> content of every file below ``root``."""
    return {name: (root / name).read_text() for name in tree_state(str(root))}


def previous_import(root: StorePath) -> dict[str, str]:
    (root / "entities" / "entity_count_user_0.txt").write_text("2\n")
    (root / "entities" / "entity_names_user_0.json").write_text('["a", "b"]')
    (root / "day0" / "edges_0_0.h5").write_text("old edges")
    return files_under(root)


def staged_append(root: StorePath) -> Staging:
    """An append's staging: a new edge path and both entity files replaced, all staged."""
    staging = Staging(keep_replaced=True, journal_dir=str(root / "entities"))
    edges = StorePath(staging.stage(str(root / "day1")))
    (edges / "edges_0_0.h5").write_text("new edges")
    entities = StorePath(staging.stage(str(root / "entities")))
    (entities / "entity_count_user_0.txt").write_text("3\n")
    (entities / "entity_names_user_0.json").write_text('["a", "b", "c"]')
    return staging


def test_an_append_killed_while_staging_leaves_the_previous_import(
    root: StorePath, caplog: pytest.LogCaptureFixture
) -> None:
    before = previous_import(root)
    staged_append(root)  # killed here
    with caplog.at_level(logging.WARNING):
        recover(str(root / "entities"), [])
    assert files_under(root) == before
    assert "was killed while staging: its staging removed, the previous import kept" in caplog.text
    assert " bytes freed)" in caplog.text and journal_tokens(str(root / "entities")) == []


def test_an_append_killed_after_its_moves_but_before_its_manifest_is_undone(root: StorePath) -> None:
    before = previous_import(root)
    staged_append(root).move_into_place()  # every file moved, the old ones in backups; killed before the record
    assert (root / "entities" / "entity_count_user_0.txt").read_text() == "3\n"
    recover(str(root / "entities"), [])
    assert files_under(root) == before


def test_an_append_killed_after_its_manifest_is_kept(root: StorePath) -> None:
    previous_import(root)
    staging = staged_append(root)
    staging.move_into_place()
    write_manifest(str(root / "entities"), {"import_token": staging.token, "report": {}})  # the commit point
    after = {k: v for k, v in files_under(root).items() if ".pbg-import-" not in k}
    recover(str(root / "entities"), [])
    assert files_under(root) == after


def test_a_plain_import_killed_while_committing_is_completed(root: StorePath) -> None:
    previous_import(root)
    staging = Staging(journal_dir=str(root / "entities"))
    edges = StorePath(staging.stage(str(root / "day0")))
    (edges / "edges_0_0.h5").write_text("new edges")
    entities = StorePath(staging.stage(str(root / "entities")))
    (entities / "entity_count_user_0.txt").write_text("3\n")
    staging._journal("committing", files={s: [n.name for n in StorePath(s).iterdir()] for s, _ in staging.staged})
    recover(str(root / "entities"), [])  # killed before its first move: every file is complete
    assert files_under(root) == {
        "entities/entity_count_user_0.txt": "3\n",
        "entities/entity_names_user_0.json": '["a", "b"]',
        "day0/edges_0_0.h5": "new edges",
    }


def test_leftovers_without_a_journal_are_removed_or_put_back(tmp_path: Path) -> None:
    """From a version before journals: a staging directory still holding files means an unfinished commit."""
    root = StorePath(str(tmp_path))
    previous_import(root)
    done = tmp_path / "day0" / ".pbg-import-0123456789ab-0"
    done.mkdir()
    (done / "edges_0_0.h5").write_bytes(b"x" * 1000)  # a killed import's staging: removed
    unfinished = tmp_path / "entities" / ".pbg-import-abcdefabcdef-1"
    unfinished.mkdir()
    (unfinished / "entity_names_user_0.json").write_text('["new"]')
    backup = tmp_path / "entities" / ".pbg-import-abcdefabcdef-replaced"
    backup.mkdir()
    (backup / "entity_count_user_0.txt").write_text("2\n")
    (tmp_path / "entities" / "entity_count_user_0.txt").write_text("99\n")  # moved in before the kill
    recover(str(tmp_path / "entities"), [str(tmp_path / "day0")])
    assert (tmp_path / "entities" / "entity_count_user_0.txt").read_text() == "2\n"
    assert not list(tmp_path.rglob(".pbg-import-*"))


def test_spill_directories_of_dead_imports_are_removed(tmp_path: Path) -> None:
    mine = tmp_path / f"{SPILL_PREFIX}mine"
    mine.mkdir()
    claim_spill(str(mine))
    unclaimed = tmp_path / f"{SPILL_PREFIX}unclaimed"  # being created, or an older version's
    unclaimed.mkdir()
    dead = tmp_path / f"{SPILL_PREFIX}dead"
    dead.mkdir()
    script = "import sys; from storage.importing.leftovers import claim_spill; claim_spill(sys.argv[1])"
    subprocess.run([sys.executable, "-c", script, str(dead)], check=True, cwd=REPO, env={**os.environ})
    (dead / "lhs.bin").write_bytes(b"\0" * 4096)
    assert json.loads((dead / "owner.json").read_text())["pid"] != os.getpid()
    removed, freed = remove_dead_spills(str(tmp_path))
    assert removed == 1 and freed >= 4096
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{SPILL_PREFIX}mine", f"{SPILL_PREFIX}unclaimed"]
