"""storage.fs.globs: one rule for glob patterns on every filesystem (local paths, file://, s3://)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

from storage.fs import globs

REPO = Path(__file__).resolve().parents[3]


def touch(url: str) -> None:
    with fsspec.open(url, "w") as handle:
        handle.write("x\n")


@pytest.mark.parametrize(
    ("pattern", "root"),
    [
        ("in", "in"),
        ("in/", "in"),
        ("/p/in/*.tsv", "/p/in"),
        ("in/2026-*/edges.tsv", "in"),
        ("s3://bucket/in/*.parquet", "s3://bucket/in"),
        ("s3://bucket*", "s3://bucket"),
        ("file:///p/in/day?.tsv", "file:///p/in"),
        ("*.tsv", "."),
        ("/*.tsv", "/"),
    ],
)
def test_the_root_is_the_directory_above_the_first_glob_character(pattern: str, root: str) -> None:
    assert globs.glob_root(pattern) == root
    assert globs.has_glob(pattern) == (pattern not in ("in", "in/"))


def test_matches_keep_the_pattern_s_form_on_every_filesystem(store_root: str) -> None:
    for name in ("edges/gen0001-a_partitioned/edges_0_0.h5", "edges/gen0000-b_partitioned/edges_0_0.h5", "edges/x.txt"):
        touch(f"{store_root}/{name}")
    directories = globs.glob(f"{store_root}/edges/gen*_partitioned", "directory")
    assert directories == [f"{store_root}/edges/gen0000-b_partitioned", f"{store_root}/edges/gen0001-a_partitioned"]
    assert globs.glob(f"{store_root}/edges/*", "file") == [f"{store_root}/edges/x.txt"]
    assert globs.glob(f"{store_root}/nothing/*", "file") == []


def test_a_file_url_pattern_gives_file_urls_and_a_plain_one_plain_paths(tmp_path: Path) -> None:
    touch(str(tmp_path / "in" / "a.tsv"))
    assert globs.glob(f"file://{tmp_path}/in/*.tsv", "file") == [f"file://{tmp_path}/in/a.tsv"]
    assert globs.glob(f"{tmp_path}/in/*.tsv", "file") == [f"{tmp_path}/in/a.tsv"]
    assert globs.in_form_of("simplecache::s3://b/in/*", "b/in/a.tsv") == "simplecache::s3://b/in/a.tsv"


def test_the_string_checks_load_no_filesystem_library() -> None:
    """`pbg train` checks a config's patterns before its server starts: has_glob must not load fsspec."""
    code = "import storage.fs.globs as g, sys; g.has_glob('a*'); g.glob_root('a/*'); print('fsspec' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "False"
