"""Tests for storage.fs.identity: a file is known by its place under a root and its content, not its spelling."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import store_io
from store_io import StorePath

from storage.errors import DataNotFound
from storage.fs.identity import FileIdentity, identify, relative_place


def test_spelling_does_not_change_the_identity(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.tsv").write_bytes(b"x\tr\ty\n")
    spellings = [
        str(tmp_path / "in" / "a.tsv"),
        f"{tmp_path}/in//a.tsv",
        f"{tmp_path}/in/../in/a.tsv",
        f"file://{tmp_path}/in/a.tsv",
    ]
    identities = {identify(url, root=str(tmp_path)) for url in spellings}
    assert identities == {FileIdentity("in/a.tsv", 6, hashlib.md5(b"x\tr\ty\n").hexdigest())}


def test_a_moved_root_keeps_the_identity(tmp_path: Path) -> None:
    old = tmp_path / "project"
    (old / "in" / "day1").mkdir(parents=True)
    (old / "in" / "day1" / "e.tsv").write_bytes(b"a\tr\tb\n" * 100)
    before = identify(str(old / "in" / "day1" / "e.tsv"), root=str(old / "in"))
    new = tmp_path / "moved" / "elsewhere"
    shutil.move(str(old), str(new))
    after = identify(str(new / "in" / "day1" / "e.tsv"), root=str(new / "in"))
    assert before.same_file(after)
    assert after.relative == "day1/e.tsv"


def test_other_content_at_the_same_place_is_another_file(tmp_path: Path) -> None:
    path = tmp_path / "e.tsv"
    path.write_bytes(b"a\tr\tb\n")
    first = identify(str(path), root=str(tmp_path))
    path.write_bytes(b"a\tr\tc\n")  # same size, other bytes
    second = identify(str(path), root=str(tmp_path))
    assert first.relative == second.relative and first.size == second.size
    assert not first.same_file(second) and not first.same_content(second)


def test_a_file_outside_the_root_is_its_base_name(tmp_path: Path) -> None:
    (tmp_path / "x.tsv").write_text("a b\n")
    assert relative_place(str(tmp_path / "x.tsv"), str(tmp_path / "inbox")) == "x.tsv"
    assert relative_place(str(tmp_path / "x.tsv"), None) == "x.tsv"
    # A sibling whose name starts like the root is not below it.
    (tmp_path / "inbox2").mkdir()
    (tmp_path / "inbox2" / "y.tsv").write_text("a b\n")
    assert relative_place(str(tmp_path / "inbox2" / "y.tsv"), str(tmp_path / "inbox")) == "y.tsv"


def test_local_digest_is_the_single_part_etag_of_the_same_bytes(tmp_path: Path, s3_bucket: str) -> None:
    data = b"n1\tlinked\tn2\n" * 1000
    (tmp_path / "e.tsv").write_bytes(data)
    store_io.put_bytes(f"s3://{s3_bucket}/in/e.tsv", data)
    local = identify(str(tmp_path / "e.tsv"), root=str(tmp_path))
    remote = identify(f"s3://{s3_bucket}/in/e.tsv", root=f"s3://{s3_bucket}/in")
    assert local.same_file(remote)


def test_missing_file_names_it(root: StorePath) -> None:
    with pytest.raises(DataNotFound, match="nothing.tsv"):
        identify(str(root / "nothing.tsv"))


def test_json_round_trip_and_old_records() -> None:
    identity = FileIdentity("d/e.tsv", 12, "abc")
    assert FileIdentity.from_json(identity.to_json()) == identity
    assert FileIdentity.from_json("/abs/path/e.tsv") is None
    assert FileIdentity.from_json({"relative": "x"}) is None
