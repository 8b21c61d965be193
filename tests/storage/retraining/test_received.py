"""storage.retraining.received: a received file is known by its place under the inbox and its content, not its path."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from run_trees import run_name
from store_io import StorePath

from storage.fs.identity import FileIdentity, identify
from storage.retraining.generations import Generation
from storage.retraining.received import (
    OldPath,
    ReceivedFile,
    identify_arrival,
    inbox_root,
    judge,
    old_records,
    recorded_in_runs,
)


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


DAY3 = FileIdentity("day3.tsv", 6, md5(b"a\tb\nc"))
RECEIVED = [ReceivedFile(DAY3, 3, "2026-12-04T03:00:12Z")]


@pytest.mark.parametrize(
    ("inputs", "root"),
    [
        ("in", "in"),
        ("in/", "in"),
        ("/p/in/*.tsv", "/p/in"),
        ("in/2026-*/edges.tsv", "in"),
        ("s3://bucket/in/*.parquet", "s3://bucket/in"),
        ("s3://bucket/in/", "s3://bucket/in"),
        ("*.tsv", "."),
        ("/*.tsv", "/"),
    ],
)
def test_the_inbox_root_is_the_directory_above_the_pattern(inputs: str, root: str) -> None:
    assert inbox_root(inputs) == root


def test_the_same_place_and_content_was_received() -> None:
    verdict = judge(DAY3, RECEIVED)
    assert verdict.kind == "received" and not verdict.is_new and verdict.earlier == RECEIVED[0]
    assert verdict.describe(DAY3) == "day3.tsv: already received on 2026-12-04T03:00:12Z as generation 3: skipped"


def test_the_same_content_elsewhere_is_a_duplicate() -> None:
    copy = FileIdentity("copies/day3.tsv", DAY3.size, DAY3.digest)
    verdict = judge(copy, RECEIVED)
    assert verdict.kind == "duplicate" and not verdict.is_new
    assert verdict.describe(copy) == (
        "copies/day3.tsv holds the same bytes as day3.tsv, received on 2026-12-04T03:00:12Z as generation 3: "
        "skipped as a duplicate"
    )


def test_other_content_at_a_received_place_is_new_data_and_says_so() -> None:
    rewritten = FileIdentity("day3.tsv", DAY3.size, md5(b"a\tb\nd"))
    verdict = judge(rewritten, RECEIVED)
    assert verdict.kind == "changed" and verdict.is_new
    assert verdict.describe(rewritten) == (
        "day3.tsv changed since it was received on 2026-12-04T03:00:12Z as generation 3: importing it as new data"
    )
    # The content it had before comes back: that was received.
    assert judge(DAY3, [*RECEIVED, ReceivedFile(rewritten, 4)]).kind == "received"


def test_a_path_only_record_matches_by_place_and_never_lets_a_file_in_again() -> None:
    old = [OldPath("/old/project/in/2026-12-04/edges.tsv", 1, "2026-12-04T03:00:00Z")]
    same_place = FileIdentity("2026-12-04/edges.tsv", 10, md5(b"x"))
    other_day = FileIdentity("2026-12-05/edges.tsv", 10, md5(b"x"))
    assert judge(same_place, [], old).kind == "old path"
    assert judge(other_day, [], old).kind == "new"
    assert judge(FileIdentity("edges.tsv", 1, "d"), [], [OldPath("in/edges.tsv", 0)]).kind == "old path"
    assert judge(FileIdentity("edges.tsv", 1, "d"), [], [OldPath("s3://b/in/edges.tsv", 0)]).kind == "old path"
    assert judge(FileIdentity("ges.tsv", 1, "d"), [], [OldPath("/in/edges.tsv", 0)]).kind == "new"
    # An identity recorded at that place says more than a path: its content decides.
    rewritten = ReceivedFile(FileIdentity("2026-12-04/edges.tsv", 10, md5(b"y")), 2)
    assert judge(same_place, [rewritten], old).kind == "changed"


def test_records_round_trip_and_junk_is_no_record() -> None:
    record = ReceivedFile(DAY3, 3, "2026-12-04T03:00:12Z", 1733281212.5)
    assert ReceivedFile.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert ReceivedFile.from_json({"relative": "a", "size": 1, "digest": "d"}) is None  # no generation
    assert ReceivedFile.from_json("in/day3.tsv") is None


def test_an_unchanged_local_file_is_not_read_again(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    path = inbox / "day1.tsv"
    path.write_bytes(b"a\tb\n")
    identity, mtime = identify_arrival(str(path), str(inbox), [])
    assert identity == identify(str(path), str(inbox)) and mtime == os.stat(path).st_mtime
    # A record with the same place, size and mtime is trusted (its digest is taken as is): no second read.
    trusted = ReceivedFile(FileIdentity("day1.tsv", 4, "digest-from-the-record"), 1, None, mtime)
    assert identify_arrival(str(path), str(inbox), [trusted])[0].digest == "digest-from-the-record"
    os.utime(path, (mtime + 60, mtime + 60))  # touched: read and hashed again
    assert identify_arrival(str(path), str(inbox), [trusted])[0] == identity


def test_an_object_is_known_by_its_etag_under_its_prefix(store_root: str) -> None:
    import fsspec

    data = b"u1\tu2\n" * 10
    with fsspec.open(f"{store_root}/in/day0.tsv", "wb") as handle:
        handle.write(data)
    identity, _ = identify_arrival(f"{store_root}/in/day0.tsv", inbox_root(f"{store_root}/in/*.tsv"), [])
    assert identity == FileIdentity("day0.tsv", len(data), md5(data))  # single-part ETag = MD5 = local digest


def test_old_records_identify_what_is_still_there_and_keep_the_path_of_what_is_gone(tmp_path: Path) -> None:
    inbox = tmp_path / "in"
    inbox.mkdir()
    (inbox / "day0.tsv").write_bytes(b"a\tb\n")
    history = [
        {"generation": 0, "imported_at": "T0", "inputs": [str(inbox / "day0.tsv")]},
        {"generation": 1, "imported_at": "T1", "inputs": ["/moved/away/in/day1.tsv"]},
        {"generation": 2, "imported_at": None},  # PBG's import: nothing known
    ]
    found, gone = old_records([Generation.from_entry(e) for e in history], str(inbox), [])
    assert [(r.identity, r.generation, r.received_at) for r in found] == [
        (FileIdentity("day0.tsv", 4, md5(b"a\tb\n")), 0, "T0")
    ]
    assert gone == [OldPath("/moved/away/in/day1.tsv", 1, "T1")]
    # A path an identity already covers (same generation and place) says nothing more: the file may
    # have been rewritten since, and that is new data, not "received with the content it has now".
    covering = ReceivedFile(FileIdentity("day0.tsv", 4, "the digest it had then"), 0)
    assert old_records([Generation.from_entry(e) for e in history], str(inbox), [covering]) == ([], gone)


def test_an_import_s_recorded_content_finds_its_file_wherever_the_inbox_moved(tmp_path: Path) -> None:
    """Run directories gone and the project moved: the manifest's ``input_files`` (content) still
    keeps the file out, at any place under the new inbox; other content at its place is new data
    only by rule 3 of a record of that place, never through the old path's content."""
    inbox = tmp_path / "moved" / "in"
    (inbox / "sub").mkdir(parents=True)
    (inbox / "sub" / "day1.tsv").write_bytes(b"x\ty\n")
    history = [
        {
            "generation": 1,
            "imported_at": "T1",
            "inputs": ["/old/project/in/day1.tsv"],
            "input_files": [FileIdentity("in/day1.tsv", 4, md5(b"x\ty\n")).to_json()],
        }
    ]
    found, gone = old_records([Generation.from_entry(e) for e in history], str(inbox), [])
    assert gone == [OldPath("/old/project/in/day1.tsv", 1, "T1")]
    moved, _ = identify_arrival(str(inbox / "sub" / "day1.tsv"), str(inbox), [])
    assert judge(moved, found, gone).kind == "duplicate"
    other = FileIdentity("day1.tsv", 4, md5(b"z\tw\n"))
    assert judge(other, found, gone).kind == "old path"  # the old path's place: skipped, as before


def test_every_run_directory_adds_to_what_was_received(root: StorePath) -> None:
    first = ReceivedFile(DAY3, 3, "T3")
    second = ReceivedFile(FileIdentity("day4.tsv", 2, "e4"), 4, "T4")
    states = {
        run_name(1): {"generation": 3, "gate": "passed", "holdouts": ["/x/gen0003-day3_holdout"]},
        run_name(2): {"generation": 3, "gate": "passed", "received_files": [first.to_json()]},
        run_name(3): {"generation": 4, "gate": "failed", "received_files": [first.to_json(), second.to_json()]},
    }
    for name, state in states.items():
        (root / name / "retrain.json").write_text(json.dumps(state))
    (root / run_name(4) / "checkpoint_version.txt").write_text("0\n")  # no retrain.json
    records = recorded_in_runs(str(root))
    assert records.received == [first, second]
    assert records.holdouts == {"gen0003-day3_holdout": run_name(1)}


def test_a_moved_inbox_keeps_its_identities(tmp_path: Path) -> None:
    old = tmp_path / "project"
    (old / "in" / "2026-12-04").mkdir(parents=True)
    (old / "in" / "2026-12-04" / "edges.tsv").write_bytes(b"a\tb\n" * 3)
    before, _ = identify_arrival(str(old / "in" / "2026-12-04" / "edges.tsv"), inbox_root(f"{old}/in/*/edges.tsv"), [])
    shutil.move(str(old), str(tmp_path / "moved"))
    new = tmp_path / "moved" / "in" / "2026-12-04" / "edges.tsv"
    after, _ = identify_arrival(str(new), inbox_root(f"{tmp_path}/moved/in/*/edges.tsv"), [])
    assert judge(after, [ReceivedFile(before, 0)]).kind == "received"
