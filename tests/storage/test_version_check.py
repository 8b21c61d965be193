"""storage.version_check: a version is complete when every file is there, readable and of the
config's shapes; an incomplete one is refused in one line naming both versions, nothing changed.

Every state is planted with real files (written by CheckpointStore, then cut short, replaced or
left out), once on local disk and once on the S3 server (``store_root``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from disk_state import changes, tree_state
from store_io import StorePath

from pbg_core.errors import ShapeError
from pbg_core.ports import CheckpointMetadata, CompleteVersion, VersionLayout
from storage.checkpoints import CheckpointStore
from storage.fs.changes import move, remove
from storage.version_check import HEADER_BLOCK, IncompleteVersionError, check_complete, is_complete

META = CheckpointMetadata(config_json="{}")
# Two partitions of "user" (partitioned), one of "item" (unpartitioned or featurized: partition 0).
LAYOUT = VersionLayout({("user", 0): (6, 4), ("user", 1): (5, 4), ("item", 0): (3, 4)})


def write_version(store: CheckpointStore, version: int, skip: tuple[str, ...] = ()) -> None:
    """Every file of ``version`` as training writes it, except the names in ``skip``."""
    for (entity, part), (rows, dim) in LAYOUT.embeddings.items():
        if f"embeddings_{entity}_{part}.v{version}.h5" not in skip:
            store.save_embeddings(entity, part, version, torch.ones(rows, dim), b"optimizer", META)
    if f"model.v{version}.h5" not in skip:
        store.save_model(version, {"w": torch.ones(2)}, {"w": "relations/0/operator/rhs/diagonal"}, None, META)


@pytest.fixture
def store(root: StorePath) -> CheckpointStore:
    return CheckpointStore(str(root))


def refusal(store: CheckpointStore, version: int) -> str:
    """The one-line message ``check_complete`` refuses ``version`` with, the files unchanged."""
    before = tree_state(store.url)
    with pytest.raises(IncompleteVersionError) as raised:
        store.check_complete(version, LAYOUT)
    assert changes(before, tree_state(store.url)) == []
    message = str(raised.value)
    assert "\n" not in message and message.startswith(f"{store.url}: ")
    return message[len(store.url) + 2 :]


def test_a_complete_version_gives_evidence(store: CheckpointStore) -> None:
    write_version(store, 2)
    assert store.check_complete(2, LAYOUT) == CompleteVersion(store.url, 2)
    assert check_complete(store.url, None, 0, LAYOUT) == CompleteVersion(store.url, 0)  # nothing committed
    assert is_complete(store.url, None, 2, LAYOUT) and not is_complete(store.url, None, 3, LAYOUT)


def test_a_pointer_ahead_of_its_files_names_both_versions(store: CheckpointStore) -> None:
    # An interrupted copy of a directory at version 3: the small pointer went first.
    write_version(store, 2)
    store.write_version(3)
    assert refusal(store, 3) == (
        "checkpoint_version.txt says 3 but version 3's files are missing (4 of 4: embeddings_item_0.v3.h5, "
        "embeddings_user_0.v3.h5, embeddings_user_1.v3.h5, model.v3.h5): found complete version 2; nothing "
        "was removed; restore version 3's files, or write 2 into checkpoint_version.txt to go on from version 2"
    )


def test_a_snapshot_holding_the_missing_version_is_named(store: CheckpointStore) -> None:
    write_version(store, 3)
    write_version(store, 4)
    store.write_version(4)
    store.preserve_version(store.check_complete(4, LAYOUT), epoch=2)  # epoch_2/ holds version 4
    remove(store.file_url("model.v4.h5"))  # lost from the main directory since
    assert refusal(store, 4) == (
        "checkpoint_version.txt says 4 but version 4's files are missing (1 of 4: model.v4.h5): found complete "
        "version 3; nothing was removed; restore version 4's files (a complete copy is in epoch_2/), or write 3 "
        "into checkpoint_version.txt to go on from version 3"
    )


def test_files_cut_short_or_foreign_are_unreadable(root: StorePath, store: CheckpointStore) -> None:
    write_version(store, 1)
    write_version(store, 2, skip=("embeddings_item_0.v2.h5",))
    store.write_version(2)
    cut = root / "embeddings_user_1.v2.h5"
    cut.write_bytes(cut.read_bytes()[:3000])  # an interrupted copy
    (root / "model.v2.h5").write_text("not HDF5")
    message = refusal(store, 2)
    assert message.startswith(
        "checkpoint_version.txt says 2 but version 2's files are missing or unreadable (embeddings_item_0.v2.h5 "
        "missing, embeddings_user_1.v2.h5: not a readable HDF5 file ("
    )
    assert "truncated file" in message and "model.v2.h5: not a readable HDF5 file" in message
    assert message.endswith(
        "found complete version 1; nothing was removed; restore version 2's files, or write 1 into "
        "checkpoint_version.txt to go on from version 1"
    )


def test_the_complete_version_may_be_the_uncommitted_one(store: CheckpointStore) -> None:
    # Pointer 2 with a file of 2 lost, and 3 written in full but never committed.
    write_version(store, 2, skip=("embeddings_user_0.v2.h5",))
    write_version(store, 3)
    store.write_version(2)
    assert refusal(store, 2) == (
        "checkpoint_version.txt says 2 but version 2's files are missing (1 of 4: embeddings_user_0.v2.h5): "
        "found complete version 3 (written, never committed); nothing was removed; restore version 2's files, "
        "or write 3 into checkpoint_version.txt to go on from version 3"
    )


def test_no_complete_version_anywhere(store: CheckpointStore) -> None:
    write_version(store, 1, skip=("model.v1.h5",))
    write_version(store, 2, skip=("embeddings_item_0.v2.h5",))
    store.write_version(2)
    assert refusal(store, 2) == (
        "checkpoint_version.txt says 2 but version 2's files are missing (1 of 4: embeddings_item_0.v2.h5): "
        "found no complete version (version 1 is incomplete too); nothing was removed; restore version 2's "
        "files, or train from scratch into a new checkpoint_path"
    )


def test_a_version_about_to_be_committed_names_the_pointer(store: CheckpointStore) -> None:
    write_version(store, 4)
    write_version(store, 5, skip=("model.v5.h5",))
    store.write_version(4)
    assert refusal(store, 5) == (
        "version 5's files are missing (1 of 4: model.v5.h5), so it is not committed (checkpoint_version.txt "
        "says 4): found complete version 4; nothing was removed"
    )


def test_a_model_file_without_its_group_is_unreadable(store: CheckpointStore) -> None:
    write_version(store, 1, skip=("model.v1.h5",))
    store.save_embeddings("user", 9, 1, torch.ones(1, 4), None, META)  # a valid HDF5 file ...
    move(store.file_url("embeddings_user_9.v1.h5"), store.file_url("model.v1.h5"))  # ... under the model's name
    store.write_version(1)
    assert "model.v1.h5: missing group 'model'; found ['embeddings']" in refusal(store, 1)


def test_other_shapes_are_a_shape_error_naming_each(store: CheckpointStore) -> None:
    write_version(store, 1)
    store.save_embeddings("user", 1, 1, torch.ones(7, 4), None, META)  # entities imported again
    store.write_version(1)
    before = tree_state(store.url)
    with pytest.raises(ShapeError) as raised:
        store.check_complete(1, LAYOUT)
    assert str(raised.value) == (
        f"{store.url} version 1 does not fit this config (another config, or entities imported again?): "
        "entity type 'user' partition 1: stored shape (7, 4), this config expects (5, 4) (entity count, "
        "dimension); nothing was removed"
    )
    assert changes(before, tree_state(store.url)) == []


def test_on_s3_only_the_metadata_is_read(s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One listing plus a few ranged reads per file: a 16 MB partition is not downloaded."""
    import s3fs.core

    store = CheckpointStore(f"s3://{s3_bucket}/big")
    big = VersionLayout({("user", 0): (32_768, 128)})  # 16 MiB of embeddings, 16 MiB of Adagrad sums
    store.save_embeddings("user", 0, 1, torch.ones(32_768, 128), bytes(1 << 24), META)
    store.save_model(1, {}, {}, None, META)
    fetched: list[int] = []
    real = s3fs.core.S3File._fetch_range

    def counted(self: Any, start: int, end: int) -> Any:
        data = real(self, start, end)
        fetched.append(len(data))
        return data

    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", counted)
    assert store.check_complete(1, big) == CompleteVersion(store.url, 1)
    assert 0 < sum(fetched) <= 8 * HEADER_BLOCK, fetched


EXITS_CLEANLY = """
import os, sys
from s3_proxy import S3Proxy
proxy = S3Proxy(os.environ["AWS_ENDPOINT_URL"])
proxy.start()
os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint_url
import torch
from pbg_core.ports import CheckpointMetadata, VersionLayout
from storage.checkpoints import CheckpointStore
from storage.fs import urls
from storage.errors import StorageUnreachable

store = CheckpointStore(sys.argv[1])
store.save_embeddings("u", 0, 1, torch.ones(5, 4), None, CheckpointMetadata(config_json=""))
store.save_model(1, {}, {}, None, CheckpointMetadata(config_json=""))
real_open = urls.resolve(store.url)[0].__class__.open

def open_then_fail(self, *args, **kwargs):  # found, then the store goes away before the first read
    handle = real_open(self, *args, **kwargs)
    proxy.set_down(True)
    return handle

urls.resolve(store.url)[0].__class__.open = open_then_fail
try:
    store.check_complete(1, VersionLayout({("u", 0): (5, 4)}))
except StorageUnreachable as err:
    print("refused:", err)
"""


def test_a_store_failing_mid_read_is_a_storage_error_and_the_process_exits_cleanly(s3_bucket: str) -> None:
    """What fails is the store, not the file: the error says so (a retry may help), never "missing".

    In a process of its own: a failure kept with its traceback made a cycle through h5py's C
    structures, and the process crashed at exit (SIGSEGV).
    """
    tests = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    done = subprocess.run(
        [sys.executable, "-c", EXITS_CLEANLY, f"s3://{s3_bucket}/ckpt"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.startswith(f"refused: s3://{s3_bucket}/ckpt/embeddings_u_0.v1.h5: connection refused"), (
        done.stdout
    )
