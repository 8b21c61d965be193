"""Tests for storage.layout: every file name, its parsers, and that no module spells one elsewhere."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pbg_core.types import Bucket
from storage import layout


def test_names_match_pbg() -> None:
    assert layout.edge_file(0, 3) == "edges_0_3.h5"
    assert layout.embeddings_file("user", 2, 7) == "embeddings_user_2.v7.h5"
    assert layout.model_file(7) == "model.v7.h5"
    assert layout.entity_count_file("user", 0) == "entity_count_user_0.txt"
    assert layout.entity_names_file("user", 0) == "entity_names_user_0.json"
    assert layout.snapshot_dir(5) == "epoch_5"
    assert layout.VERSION_FILE == "checkpoint_version.txt"
    assert layout.CONFIG_FILE == "config.json"
    assert layout.STATS_FILE == "training_stats.json"
    assert layout.DYNAMIC_REL_COUNT_FILE == "dynamic_rel_count.txt"
    assert layout.DYNAMIC_REL_NAMES_FILE == "dynamic_rel_names.json"


def test_tmp_file_inserts_before_extension() -> None:
    assert layout.tmp_file("edges_0_1.h5") == "edges_0_1.tmp.h5"
    assert layout.tmp_file("model.v3.h5") == "model.v3.tmp.h5"
    assert layout.tmp_file("checkpoint_version.txt") == "checkpoint_version.tmp.txt"
    assert layout.tmp_file("noext") == "noext.tmp"


def test_parse_edge_file() -> None:
    assert layout.parse_edge_file("edges_12_3.h5") == Bucket(12, 3)
    for name in ("edges_0_1.tmp.h5", "edges_a_1.h5", "edges_0_1.h5.bak", "xedges_0_1.h5"):
        assert layout.parse_edge_file(name) is None


def test_parse_embeddings_file_with_underscores_and_dots_in_type() -> None:
    assert layout.parse_embeddings_file("embeddings_user_item_3.v10.h5") == ("user_item", 3, 10)
    assert layout.parse_embeddings_file("embeddings_a.b_0.v1.h5") == ("a.b", 0, 1)
    assert layout.parse_embeddings_file("embeddings_user_3.v10.tmp.h5") is None


def test_parse_checkpoint_and_snapshot_names() -> None:
    assert layout.parse_checkpoint_file("model.v4.h5") == 4
    assert layout.parse_checkpoint_file("embeddings_e_0.v4.h5") == 4
    assert layout.parse_checkpoint_file("model.v4.tmp.h5") is None
    assert layout.parse_checkpoint_file("config.json") is None
    assert layout.parse_snapshot_dir("epoch_10") == 10
    assert layout.parse_snapshot_dir("epoch_x") is None


def test_similarity_index_names() -> None:
    assert layout.similarity_index_file("user", 7) == "similar_user.v7.h5"
    for entity, version in [("user", 0), ("user_item", 12), ("a.v3.b", 4)]:
        name = layout.similarity_index_file(entity, version)
        assert layout.parse_similarity_index_file(name) == (entity, version)
        assert layout.parse_checkpoint_file(name) is None  # not a file of the version: checks and snapshots skip it
    for name in ("similar_user.v7.tmp.h5", "similar_user.h5", "similar_.v1.h5", "embeddings_user_0.v7.h5"):
        assert layout.parse_similarity_index_file(name) is None


def test_names_round_trip_through_parsers() -> None:
    for entity, part, version in [("e", 0, 0), ("with_under", 11, 123)]:
        name = layout.embeddings_file(entity, part, version)
        assert layout.parse_embeddings_file(name) == (entity, part, version)
    assert layout.parse_model_file(layout.model_file(9)) == 9
    assert layout.parse_edge_file(layout.edge_file(4, 2)) == Bucket(4, 2)


def test_the_other_names_are_the_ones_on_disk() -> None:
    # Files already written by earlier versions carry these names: they never change.
    assert layout.LEASE_FILE == "lease.json"
    assert layout.IMPORT_LEASE_FILE == "import_lease.json"
    assert layout.IMPORT_MANIFEST_FILE == "import_manifest.json"
    assert layout.NEW_ROWS_FILE == "init_new_rows.h5"
    assert layout.PROGRESS_DIR == "progress"
    assert layout.progress_record_file(4) == "v4.json"
    assert layout.progress_area_dir(4, 12) == "v4-b12" and layout.progress_area_dir(4, 12).startswith(
        layout.progress_area_prefix(4)
    )
    assert layout.NAMES_DIR == "names" and layout.names_file("ab12") == "ab12.json"
    assert (layout.START_BY_NAME_DIR, layout.START_RECORD_FILE, layout.FRESH_ROWS_FILE) == (
        "init_by_name",
        "start.json",
        "fresh_rows.h5",
    )
    assert layout.reader_file("f" * 32) == ".pbg-readers/" + "f" * 32 + ".json"
    assert layout.import_journal_file("0123456789ab") == ".pbg-import-0123456789ab.json"
    assert layout.import_staging_dir("0123456789ab", 2) == ".pbg-import-0123456789ab-2"
    assert layout.import_backup_dir("0123456789ab") == ".pbg-import-0123456789ab-replaced"
    assert layout.RELATION_TYPES_FILE == "relation_types.tsv" and layout.NPY_NAMES_SUFFIX == ".names.json"
    assert (layout.IMPORT_SPILL_PREFIX, layout.SPILL_OWNER_FILE) == ("pbg-import-spill-", "owner.json")
    assert layout.remap_spill_file(3, 1) == "to3-from1.npz"
    assert layout.atomic_tmp_file("v1.json", "abc") == ".v1.json.abc.tmp"
    assert layout.WRITE_CHECK_PREFIX == ".pbg-write-check-"
    assert layout.SERVER_STARTUP_LOCK_FILE == "pbg-server-startup.lock"


def test_the_other_parsers_take_only_their_names() -> None:
    token = "0123456789ab"
    assert layout.parse_import_journal_file(layout.import_journal_file(token)) == token
    assert layout.parse_import_dir(layout.import_staging_dir(token, 7)) == (token, "7")
    assert layout.parse_import_dir(layout.import_backup_dir(token)) == (token, "replaced")
    assert layout.parse_reader_file("e" * 32 + ".json") == "e" * 32
    assert layout.parse_names_file(layout.names_file("ab12-3")) == "ab12-3"
    refused = [
        layout.parse_import_journal_file(".pbg-import-XYZ.json"),
        layout.parse_import_journal_file(layout.import_staging_dir(token, 0)),
        layout.parse_import_dir(layout.import_journal_file(token)),
        layout.parse_import_dir(".pbg-import-0123456789ab-other"),
        layout.parse_reader_file("short.json"),
        layout.parse_names_file("ab12.tmp.json"),
        layout.parse_names_file("ab12.h5"),
    ]
    assert refused == [None] * len(refused)


# ---- every name is spelled here only ------------------------------------------------------------
# A string literal that is a file name (the extensions below), or that holds a hidden ``.pbg-`` name
# (a regex included), or that copies one of layout's directory names, is reported outside
# storage/layout.py. Docstrings may show names; messages may describe them (``model.v<N>.h5`` is no
# file name); a bare extension (``.json``: a format check) is no name.
PACKAGES = ("storage", "tasks", "flows")
ROOT = Path(layout.__file__).resolve().parent.parent
NAME_EXTENSIONS = "json|h5|hdf5|txt|tsv|csv|npy|npz|parquet|lock|tmp|db|sqlite"
FILE_NAME = re.compile(r"^[\w.{}/-]*[\w{}]\.(" + NAME_EXTENSIONS + r")$")
HIDDEN_NAME = re.compile(r"(^|[^\w])\\?\.pbg-")
DIRECTORY_NAMES = {layout.PROGRESS_DIR, layout.START_BY_NAME_DIR, layout.IMPORT_SPILL_PREFIX}


def spelled_names(source: str) -> list[tuple[int, str]]:
    """(line, literal) of every file or directory name written in ``source`` (docstrings skipped)."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    parts = {id(value) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for value in node.values}
    found = []
    for node in ast.walk(tree):
        if id(node) in docstrings or id(node) in parts:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):  # f"{token}.json": each placeholder as {}
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        else:
            continue
        if FILE_NAME.match(text) or HIDDEN_NAME.search(text) or text in DIRECTORY_NAMES:
            found.append((node.lineno, text))
    return sorted(found)


def test_the_guard_finds_names_and_skips_docstrings_messages_and_extensions() -> None:
    source = '''"""Writes ``lease.json``."""
LEASE = "lease.json"
def f(token, url):
    """Reads ``{token}.json``."""
    check = url.endswith(".json")
    message = f"{url} holds no model.v<N>.h5 file"
    return f"{token}.json", ".pbg-readers", r"^\\.pbg-import-(\\d+)$", "progress"
'''
    assert spelled_names(source) == [
        (2, "lease.json"),
        (7, ".pbg-readers"),
        (7, "^\\.pbg-import-(\\d+)$"),
        (7, "progress"),
        (7, "{}.json"),
    ]


def test_file_names_are_spelled_in_storage_layout_only() -> None:
    offences = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative == "storage/layout.py":
                continue
            offences += [f"{relative}:{line}: {text!r}" for line, text in spelled_names(path.read_text())]
    assert offences == [], "file names spelled outside storage/layout.py (define them there):\n" + "\n".join(offences)


def test_importing_the_layout_loads_nothing_heavy() -> None:
    # flows/cli/preflight.py names files before the embedded server starts: no torch, numpy, fsspec, h5py.
    code = "import json, sys, storage.layout; print(json.dumps(sorted(m for m in ('torch', 'numpy', 'fsspec', 'h5py') if m in sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    assert json.loads(loaded.stdout) == []


def test_run_dir_name_is_the_utc_start_and_the_id_prefix() -> None:
    start = datetime(2026, 3, 1, 12, 30, 5, tzinfo=timezone(timedelta(hours=2)))
    assert layout.run_dir_name("0B9E1C2D-77aa-4bb0-8ccc-0123456789ab", start) == "run-20260301T103005Z-0b9e1c2d"
    with pytest.raises(ValueError, match="naive"):
        layout.run_dir_name("0b9e1c2d", datetime(2026, 3, 1))
    with pytest.raises(ValueError, match="8 hex digits.*'run-xyz'"):
        layout.run_dir_name("run-xyz", start)
    assert layout.is_run_dir_name("run-20260301T103005Z-0b9e1c2d") and not layout.is_run_dir_name("run-xyz")


def test_retraining_names() -> None:
    assert (layout.LATEST_FILE, layout.RETRAIN_STATE_FILE, layout.SPLIT_FILE) == (
        "latest.json",
        "retrain.json",
        "split.json",
    )
    assert layout.generation_edge_dir(3, "day1") == "gen0003-day1_partitioned"
    assert layout.GENERATION_DIR_RE.match(layout.generation_edge_dir(12345, "x")) is not None
    assert layout.holdout_dir("gen0003-day1_partitioned") == "gen0003-day1_holdout"
    assert layout.holdout_dir("edges") == "edges_holdout"
