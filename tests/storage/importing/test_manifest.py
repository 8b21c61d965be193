"""Re-import detection: unchanged inputs and options import nothing; any change imports again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pbg_core.config import parse_config
from storage.fs.identity import identify
from storage.importing.importer import import_edges
from storage.importing.manifest import fingerprint, generation_history, read_manifest
from storage.importing.options import ImportOptions
from storage.layout import IMPORT_MANIFEST_FILE as MANIFEST

LINES = "".join(f"n{i}\tr\tn{(i * 7) % 50}\n" for i in range(200))


def make_config(root: Path, partitions: int = 2):
    return parse_config(
        {
            "entity_path": str(root / "data"),
            "edge_paths": [str(root / "data" / "edges")],
            "checkpoint_path": str(root / "model"),
            "entities": {"n": {"num_partitions": partitions}},
            "relations": [{"name": "r", "lhs": "n", "rhs": "n"}],
            "dimension": 4,
        }
    )


def run(config, tsv: Path, **options):
    return import_edges(config, [str(tsv)], ImportOptions(lhs_col=0, rhs_col=2, rel_col=1, **options), seed=0)


@pytest.fixture
def imported(tmp_path: Path):
    tsv = tmp_path / "edges.tsv"
    tsv.write_text(LINES)
    config = make_config(tmp_path)
    first = run(config, tsv)
    return config, tsv, first


def test_an_unchanged_reimport_writes_nothing(imported) -> None:
    config, tsv, first = imported
    bucket = Path(config.edge_paths[0]) / "edges_0_1.h5"
    before = bucket.stat().st_mtime_ns
    again = run(config, tsv)
    assert again.unchanged_since is not None and "nothing to do" in str(again)
    assert again.edges_written == first.edges_written == [200]
    assert bucket.stat().st_mtime_ns == before


@pytest.mark.parametrize("change", ["content", "option", "force", "missing output"])
def test_a_change_imports_again(imported, change: str) -> None:
    config, tsv, _ = imported
    options = {}
    if change == "content":
        tsv.write_text(LINES + "n1\tr\tn2\n")
    elif change == "option":
        options["entity_min_count"] = 2
    elif change == "force":
        options["force"] = True
    else:
        (Path(config.edge_paths[0]) / "edges_1_1.h5").unlink()
    again = run(config, tsv, **options)
    assert again.unchanged_since is None
    assert (Path(config.edge_paths[0]) / "edges_1_1.h5").exists()
    manifest = json.loads((Path(config.entity_path) / MANIFEST).read_text())
    assert manifest["report"]["edges_written"] == again.edges_written


def test_a_failed_reimport_leaves_the_previous_output_and_manifest(imported, tmp_path: Path) -> None:
    """A re-import failing before its commit used to delete the manifest: the next one redid everything."""
    config, tsv, first = imported
    manifest = (Path(config.entity_path) / MANIFEST).read_text()
    bucket = Path(config.edge_paths[0]) / "edges_0_1.h5"
    before = bucket.stat().st_mtime_ns
    tsv.write_text(LINES + "n1\tr\n")  # malformed: the import fails before writing
    with pytest.raises(Exception, match="line 201"):
        run(config, tsv)
    assert (Path(config.entity_path) / MANIFEST).read_text() == manifest
    assert bucket.stat().st_mtime_ns == before
    tsv.write_text(LINES)  # the input as it was: nothing to redo
    again = run(config, tsv)
    assert again.unchanged_since is not None and again.edges_written == first.edges_written
    assert bucket.stat().st_mtime_ns == before


def test_the_manifest_goes_right_before_the_first_output_file_is_replaced(imported) -> None:
    """An interrupted commit must not leave a manifest that matches a half-replaced output."""
    from storage.edge_lists.parse import Columns, ReadSpec
    from storage.importing.outputs import Commit
    from storage.importing.run import run_import

    config, tsv, _ = imported
    bucket = Path(config.edge_paths[0]) / "edges_0_1.h5"
    before = bucket.stat().st_mtime_ns
    seen: list[tuple[bool, int]] = []

    def forget() -> None:
        seen.append(((Path(config.entity_path) / MANIFEST).exists(), bucket.stat().st_mtime_ns))
        (Path(config.entity_path) / MANIFEST).unlink()

    spec = ReadSpec(Columns(0, 2, 1, None), None, False, None)
    run_import(config, [str(tsv)], spec, seed=0, commit=Commit("0123456789ab", before_commit=forget))
    assert seen == [(True, before)]  # called once, with the old output still in place
    assert bucket.stat().st_mtime_ns != before and not (Path(config.entity_path) / MANIFEST).exists()


def test_the_fingerprint_covers_content_place_options_and_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    a.write_text("x\tr\ty\n")
    b.write_text("y\tr\tx\n")

    def print_of(*files: Path, seed: int = 0, root: Path = tmp_path) -> str:
        return fingerprint([identify(str(f), str(root)) for f in files], {"seed": seed})

    base = print_of(a, b)
    assert base == print_of(a, b)
    assert base != print_of(b, a)
    assert base != print_of(a, b, seed=1)
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in (a, b):
        (moved / f.name).write_bytes(f.read_bytes())
    assert print_of(moved / "a.tsv", moved / "b.tsv", root=moved) == base  # the same place under another root
    b.write_text("y\tr\tz\n")
    assert base != print_of(a, b)


@pytest.mark.parametrize("text", ["[]", '"a string"', "null"])
def test_a_manifest_that_is_not_an_object_imports_again(imported, text: str) -> None:
    config, tsv, first = imported
    (Path(config.entity_path) / MANIFEST).write_text(text)
    again = run(config, tsv)
    assert again.unchanged_since is None
    assert again.edges_written == first.edges_written


OLD_VERSION = "38824d5"  # the last commit whose manifests hashed each input's URL as spelled


def project(root: Path) -> Path:
    root.mkdir()
    (root / "day0.tsv").write_text(LINES)
    (root / "day1.tsv").write_text("n1\tr\tnew1\nnew1\tr\tnew2\n")
    return root


def config_in(root: Path, edge_path: str):
    return make_config(root).model_copy(update={"edge_paths": [str(root / edge_path)]})


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_moved_project_imports_nothing_again(tmp_path: Path) -> None:
    """Every path of the config is absolute: after the move each one is spelled differently."""
    first = project(tmp_path / "first")
    run(config_in(first, "data/day0"), first / "day0.tsv")
    run(config_in(first, "data/day1"), first / "day1.tsv", append=True)
    moved = tmp_path / "moved"
    first.rename(moved)
    before = tree(moved)
    again = run(config_in(moved, "data/day1"), moved / "day1.tsv", append=True)
    assert again.unchanged_since is not None and again.generation == 1
    assert tree(moved) == before
    history = generation_history(read_manifest(str(moved / "data")))
    assert [g["edge_paths"] for g in history] == [[str(moved / "data" / "day0")], [str(moved / "data" / "day1")]]
    assert history[1]["input_files"][0]["relative"] == "day1.tsv"  # relative to the import root (the project)
    grown = run(config_in(moved, "data/day2"), moved / "day1.tsv", append=False, force=True)
    assert grown.unchanged_since is None  # a change (another edge path, plain) still imports


def test_an_append_an_older_version_recorded_is_not_appended_again_after_upgrading_and_moving(tmp_path: Path) -> None:
    """Manifests without fingerprint_version match by the inputs' content and the options."""
    old_code = tmp_path / "old-pbg-flow"
    old_code.mkdir()
    repo = Path(__file__).parents[3]
    archive = subprocess.run(["git", "archive", OLD_VERSION, "storage", "pbg_core"], cwd=repo, capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"commit {OLD_VERSION} (the older manifest format) is not in this checkout's history")
    subprocess.run(["tar", "-x", "-C", str(old_code)], input=archive.stdout, check=True)
    first = project(tmp_path / "first")
    script = f"""
import sys
from pbg_core.config import ConfigSchema, parse_config
from storage.importing.importer import import_edges
# Fields added since that version (operator_init, validation, ...) are unknown to its config.
base = {{k: v for k, v in {make_config(first).model_dump(mode="json")!r}.items() if k in ConfigSchema.model_fields}}
for name, append in (("day0", False), ("day1", True)):
    config = parse_config({{**base, "edge_paths": [sys.argv[1] + "/data/" + name]}})
    import_edges(config, [sys.argv[1] + "/" + name + ".tsv"], lhs_col=0, rel_col=1, rhs_col=2, seed=0, append=append)
"""
    env = {**os.environ, "PYTHONPATH": str(old_code)}
    subprocess.run([sys.executable, "-c", script, str(first)], check=True, env=env, cwd=tmp_path)
    old_manifest = json.loads((first / "data" / MANIFEST).read_text())
    assert "fingerprint_version" not in old_manifest["generations"][1]  # really the older format
    moved = tmp_path / "moved"
    first.rename(moved)
    before = tree(moved)
    again = run(config_in(moved, "data/day1"), moved / "day1.tsv", append=True)
    assert again.unchanged_since is not None and tree(moved) == before
    (moved / "day2.tsv").write_text("new2\tr\tnew3\n")
    grown = run(config_in(moved, "data/day2"), moved / "day2.tsv", append=True)
    assert grown.generation == 2
    generations = json.loads((moved / "data" / MANIFEST).read_text())["generations"]
    assert [g.get("fingerprint_version") for g in generations] == [None, None, 2]
