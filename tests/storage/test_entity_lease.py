"""storage.entity_lease: one import writes an entity_path, never while a reader (training, eval, export) reads it."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from disk_state import changes, tree_state

from storage.entity_lease import (
    acquire_import,
    acquire_reader,
    import_lease,
    importing,
    reader_files,
    reader_lease,
    reading,
)
from storage.fs import reads
from storage.layout import IMPORT_LEASE_FILE, READERS_DIR
from storage.lease import Lease, LeaseHeldError

REPO = Path(__file__).parents[2]


def test_a_second_import_is_refused_naming_the_first_and_nothing_changes(store_root: str) -> None:
    entities = f"{store_root}/data"
    with importing(entities, "pbg import config.json day1.tsv --append"):
        before = tree_state(entities)
        with pytest.raises(LeaseHeldError) as refused, importing(entities, "pbg import config.json day2.tsv --append"):
            pytest.fail("two imports held one entity_path")
        assert tree_state(entities) == before
    message = str(refused.value)
    assert message.startswith(f"{entities}/{IMPORT_LEASE_FILE}: entity_path {entities} is being imported into by run ")
    assert "'pbg import config.json day1.tsv --append' (pid" in message and "\n" not in message
    assert not reads.exists(f"{entities}/{IMPORT_LEASE_FILE}")


def test_an_import_is_refused_while_a_training_run_reads(store_root: str) -> None:
    entities = f"{store_root}/data"
    with reading(entities, "train run (1234)"):
        before = tree_state(entities)
        with pytest.raises(LeaseHeldError, match=r"is being read by run 'train run \(1234\)'"):
            acquire_import(import_lease(entities, "pbg import"), entities)
        assert changes(before, tree_state(entities)) == []  # the refused import's lease is gone again
    assert reader_files(entities) == []
    with importing(entities, "pbg import"):  # free once the reader is done
        pass


def test_a_reader_is_refused_while_an_import_writes(store_root: str) -> None:
    entities = f"{store_root}/data"
    with importing(entities, "pbg import config.json a.tsv"):
        before = tree_state(entities)
        with pytest.raises(LeaseHeldError, match="is being imported into by run 'pbg import config.json a.tsv'"):
            acquire_reader(reader_lease(entities, "train"), entities)
        assert changes(before, tree_state(entities)) == []  # its reader file is deleted again
    with reading(entities, "train") as keeper:
        assert keeper is not None and len(reader_files(entities)) == 1


def test_many_readers_share_and_an_import_sees_every_one(tmp_path: Path) -> None:
    entities = str(tmp_path / "data")
    with reading(entities, "train a"), reading(entities, "eval b"):
        assert sorted(h.run for _, h in reader_files(entities) if h is not None) == ["eval b", "train a"]
        with pytest.raises(LeaseHeldError, match="is being read by run"):
            acquire_import(import_lease(entities, "pbg import"), entities)


def test_the_reader_file_of_a_killed_run_is_removed_by_the_next_import(tmp_path: Path) -> None:
    entities = tmp_path / "data"
    script = (
        "import sys; from storage.entity_lease import acquire_reader, reader_lease; "
        "acquire_reader(reader_lease(sys.argv[1], 'killed training', ), sys.argv[1])"
    )
    # The child takes a reader's lease and exits without releasing it, as after kill -9.
    subprocess.run([sys.executable, "-c", script, str(entities)], check=True, cwd=REPO)
    assert len(list((entities / READERS_DIR).iterdir())) == 1
    with importing(str(entities), "pbg import"):  # no wait for the reader's expiry
        assert list((entities / READERS_DIR).iterdir()) == []


def test_a_garbage_reader_file_is_no_reader(tmp_path: Path) -> None:
    readers = tmp_path / "data" / READERS_DIR
    readers.mkdir(parents=True)
    (readers / f"{'a' * 32}.json").write_text("{not json")
    (readers / f"{'b' * 32}.tmp.json").write_text("a renewal's temporary file")
    with importing(str(tmp_path / "data"), "pbg import"):
        assert [p.name for p in readers.iterdir()] == [f"{'b' * 32}.tmp.json"]


def test_a_first_import_refused_or_failed_leaves_no_directory(tmp_path: Path) -> None:
    entities = tmp_path / "a" / "b" / "data"
    with pytest.raises(RuntimeError, match="bad input"), importing(str(entities), "pbg import"):
        raise RuntimeError("bad input")
    assert list(tmp_path.iterdir()) == []


def race(entities: str, readers: int) -> list[Lease]:
    """One import and ``readers`` readers of ``entities`` starting at once; the leases that were granted."""
    start = threading.Barrier(1 + readers)
    granted: list[Lease] = []

    def contend(lease: Lease, acquire: Callable[[Lease, str], object]) -> None:
        start.wait()
        try:
            acquire(lease, entities)
            granted.append(lease)
        except LeaseHeldError:
            pass

    contenders = [(import_lease(entities, "pbg import"), acquire_import)]
    contenders += [(reader_lease(entities, f"train {i}"), acquire_reader) for i in range(readers)]
    threads = [threading.Thread(target=contend, args=pair) for pair in contenders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return granted


def test_an_import_and_readers_starting_together_never_both_hold(store_root: str) -> None:
    """The protocol's point: whoever writes its file second sees the other's, so never both proceed.
    Both may back off (on S3 they often do here, all starting within a millisecond): each then
    deletes its file and names the other, and a retry goes ahead (the tests above)."""
    entities = f"{store_root}/data"
    for _ in range(12):
        granted = race(entities, readers=3)
        names = sorted(lease.run for lease in granted)
        assert not ("pbg import" in names and len(names) > 1), names
        for lease in granted:
            lease.release()
        assert not reads.exists(f"{entities}/{IMPORT_LEASE_FILE}") and reader_files(entities) == []


def test_a_reader_of_an_entity_path_that_does_not_exist_leaves_nothing(tmp_path: Path) -> None:
    with reading(str(tmp_path / "a" / "data"), "pbg eval"):
        assert (tmp_path / "a" / "data" / READERS_DIR).is_dir()
    assert list(tmp_path.iterdir()) == []
