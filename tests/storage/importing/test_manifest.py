"""Re-import detection: unchanged inputs and options import nothing; any change imports again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pbg_core.config import parse_config
from storage.importing.importer import import_edges
from storage.importing.manifest import MANIFEST, fingerprint

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
    return import_edges(config, [str(tsv)], lhs_col=0, rel_col=1, rhs_col=2, seed=0, **options)


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
    from storage.importing.parse import Columns, ReadSpec
    from storage.importing.run import run_import

    config, tsv, _ = imported
    bucket = Path(config.edge_paths[0]) / "edges_0_1.h5"
    before = bucket.stat().st_mtime_ns
    seen: list[tuple[bool, int]] = []

    def forget() -> None:
        seen.append(((Path(config.entity_path) / MANIFEST).exists(), bucket.stat().st_mtime_ns))
        (Path(config.entity_path) / MANIFEST).unlink()

    run_import(config, [str(tsv)], ReadSpec(Columns(0, 2, 1, None), None, False, None), seed=0, before_commit=forget)
    assert seen == [(True, before)]  # called once, with the old output still in place
    assert bucket.stat().st_mtime_ns != before and not (Path(config.entity_path) / MANIFEST).exists()


def test_the_fingerprint_covers_content_options_and_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    a.write_text("x\tr\ty\n")
    b.write_text("y\tr\tx\n")
    base = fingerprint([str(a), str(b)], {"seed": 0})
    assert base == fingerprint([str(a), str(b)], {"seed": 0})
    assert base != fingerprint([str(b), str(a)], {"seed": 0})
    assert base != fingerprint([str(a), str(b)], {"seed": 1})
    b.write_text("y\tr\tz\n")
    assert base != fingerprint([str(a), str(b)], {"seed": 0})


@pytest.mark.parametrize("text", ["[]", '"a string"', "null"])
def test_a_manifest_that_is_not_an_object_imports_again(imported, text: str) -> None:
    config, tsv, first = imported
    (Path(config.entity_path) / MANIFEST).write_text(text)
    again = run(config, tsv)
    assert again.unchanged_since is None
    assert again.edges_written == first.edges_written
