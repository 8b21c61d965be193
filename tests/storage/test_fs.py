"""Tests for storage.fs: URL resolution, atomic writes, copies, error translation, S3.

Local-disk semantics (tmp + fsync + rename) are tested on a temporary directory; the
shared operations run on local disk and on the moto S3 server (``root`` fixture); the
read cache, upload verification and listing freshness in ``test_fs_s3.py``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import store_io
from s3_server import FAST_FAIL_OPTIONS, S3Server, free_port, new_bucket_name
from store_io import StorePath

from storage import fs
from storage.errors import AccessDenied, BadDataError, BadUrlError, DataNotFound, StorageUnreachable


def test_resolve_plain_path_and_file_url(tmp_path: Path) -> None:
    for url in (str(tmp_path), f"file://{tmp_path}"):
        filesystem, path = fs.resolve(url)
        assert fs.is_local(filesystem)
        assert path == str(tmp_path)


def test_join_url_keeps_scheme() -> None:
    assert fs.join_url("s3://b/ckpt/", "epoch_5", "model.v5.h5") == "s3://b/ckpt/epoch_5/model.v5.h5"
    assert fs.join_url("file:///d", "x.txt") == "file:///d/x.txt"
    assert fs.join_url("/d", "x.txt") == "/d/x.txt"
    assert fs.join_url("/d") == "/d"


def test_write_and_read_text_round_trip(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/sub/dir/a.txt"
    fs.write_text_atomic(url, "héllo\n")
    assert fs.read_text(url) == "héllo\n"
    assert (tmp_path / "sub" / "dir" / "a.txt").read_text(encoding="utf-8") == "héllo\n"
    fs.write_text_atomic(url, "second")
    assert fs.read_text(url) == "second"
    # No temporary file is left next to the result.
    assert os.listdir(tmp_path / "sub" / "dir") == ["a.txt"]


def test_read_missing_raises_data_not_found_with_url(tmp_path: Path) -> None:
    url = str(tmp_path / "missing.txt")
    with pytest.raises(DataNotFound, match="missing.txt"):
        fs.read_text(url)


def test_read_non_utf8_is_bad_data(tmp_path: Path) -> None:
    (tmp_path / "b.txt").write_bytes(b"ok\xff")
    with pytest.raises(BadDataError, match="offset 2"):
        fs.read_text(str(tmp_path / "b.txt"))


def test_local_write_failure_keeps_previous_file_and_removes_tmp(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), fs.local_write(str(target)) as local:
        Path(local).write_text("new, half written")
        raise RuntimeError("boom")
    assert target.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]


def test_local_write_replaces_stale_tmp(tmp_path: Path) -> None:
    (tmp_path / "f.tmp.txt").write_text("stale junk from a crash")
    with fs.local_write(str(tmp_path / "f.txt")) as local:
        assert local == str(tmp_path / "f.tmp.txt")
        assert not os.path.exists(local)
        Path(local).write_text("fresh")
    assert (tmp_path / "f.txt").read_text() == "fresh"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]


def test_exists_remove_listdir(tmp_path: Path) -> None:
    base = str(tmp_path)
    assert fs.listdir(fs.join_url(base, "nope")) == []
    fs.write_text_atomic(fs.join_url(base, "b.txt"), "1")
    fs.write_text_atomic(fs.join_url(base, "a.txt"), "2")
    fs.makedirs(fs.join_url(base, "epoch_1"))
    assert fs.listdir(base) == ["a.txt", "b.txt", "epoch_1"]
    assert fs.exists(fs.join_url(base, "a.txt"))
    fs.remove(fs.join_url(base, "a.txt"))
    assert not fs.exists(fs.join_url(base, "a.txt"))
    fs.remove(fs.join_url(base, "a.txt"))  # missing_ok by default
    with pytest.raises(DataNotFound, match="a.txt"):
        fs.remove(fs.join_url(base, "a.txt"), missing_ok=False)


def test_copy_is_an_independent_real_file(tmp_path: Path) -> None:
    src, dst = tmp_path / "src.bin", tmp_path / "snap" / "dst.bin"
    src.write_bytes(b"\x00\x01payload")
    fs.copy(str(src), str(dst))
    assert dst.read_bytes() == b"\x00\x01payload"
    assert not dst.is_symlink()
    src.write_bytes(b"changed")
    assert dst.read_bytes() == b"\x00\x01payload"
    with pytest.raises(DataNotFound):
        fs.copy(str(tmp_path / "nope"), str(dst))


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A fresh directory on fsspec's in-memory filesystem (a non-local filesystem)."""
    url = f"memory://pbg-test-{uuid.uuid4().hex}"
    yield url
    filesystem, path = fs.resolve(url)
    if filesystem.exists(path):
        filesystem.rm(path, recursive=True)


def test_remote_path_round_trips_through_local_temp_files(memory_url: str) -> None:
    filesystem, _ = fs.resolve(memory_url)
    assert not fs.is_local(filesystem)
    url = fs.join_url(memory_url, "x.txt")
    fs.write_text_atomic(url, "remote")
    assert fs.read_text(url) == "remote"
    with fs.local_read_path(url) as local:
        assert Path(local).read_text() == "remote"
    fs.copy(url, fs.join_url(memory_url, "epoch_1", "x.txt"))
    assert fs.read_text(fs.join_url(memory_url, "epoch_1", "x.txt")) == "remote"
    assert fs.listdir(memory_url) == ["epoch_1", "x.txt"]


def test_remote_write_failure_uploads_nothing(memory_url: str) -> None:
    url = fs.join_url(memory_url, "y.txt")
    with pytest.raises(RuntimeError), fs.local_write(url) as local:
        Path(local).write_text("partial")
        raise RuntimeError("boom")
    assert not fs.exists(url)
    with pytest.raises(DataNotFound), fs.local_read_path(url):
        pass


# -- the same operations on local disk and on the S3 server ----------------------------------


def test_round_trip_on_every_store(root: StorePath) -> None:
    base = str(root)
    url = fs.join_url(base, "sub", "a.txt")
    assert not fs.exists(url) and fs.listdir(base) == []
    fs.write_text_atomic(url, "héllo\n")
    assert fs.read_text(url) == "héllo\n" and (root / "sub" / "a.txt").read_text() == "héllo\n"
    fs.write_text_atomic(url, "second")  # overwrite: one object / one file, no leftovers
    assert fs.read_text(url) == "second"
    assert store_io.all_files(base) == ["sub/a.txt"]
    fs.copy(url, fs.join_url(base, "epoch_1", "a.txt"))
    assert fs.listdir(base) == ["epoch_1", "sub"]
    fs.write_text_atomic(url, "third")  # the copy is independent of its source
    assert fs.read_text(fs.join_url(base, "epoch_1", "a.txt")) == "second"
    fs.move(fs.join_url(base, "epoch_1", "a.txt"), fs.join_url(base, "moved", "b.txt"))
    assert store_io.all_files(base) == ["moved/b.txt", "sub/a.txt"]
    fs.remove(url)
    assert not fs.exists(url)
    with pytest.raises(DataNotFound, match="a.txt"):
        fs.remove(url, missing_ok=False)
    fs.remove_tree(fs.join_url(base, "moved"))
    assert store_io.all_files(base) == []


def test_missing_object_is_data_not_found_naming_url(root: StorePath) -> None:
    url = str(root / "missing.h5")
    with pytest.raises(DataNotFound, match="missing.h5"):
        fs.read_text(url)
    with pytest.raises(DataNotFound, match="missing.h5"), fs.local_read_path(url):
        pass
    with pytest.raises(DataNotFound, match="missing.h5"):
        fs.copy(url, str(root / "copy.h5"))


def test_write_failure_publishes_nothing(root: StorePath) -> None:
    url = str(root / "y.h5")
    with pytest.raises(RuntimeError), fs.local_write(url) as local:
        Path(local).write_text("partial")
        raise RuntimeError("boom")
    assert not fs.exists(url) and store_io.all_files(str(root)) == []


# -- S3 specifics: bad URLs, missing buckets, credentials, unreachable server ------------------


@pytest.mark.parametrize("url", ["s3://", "s3:///key.txt", "s3://Bad_Bucket/k", "s3://ab/k", "s3://a..b/k"])
def test_bad_s3_url_is_bad_url_error(url: str) -> None:
    with pytest.raises(BadUrlError, match="expected s3://<bucket>/<key>") as info:
        fs.read_text(url)
    assert isinstance(info.value, ValueError) and str(info.value).startswith(url)


def test_missing_bucket_is_data_not_found(s3_server: S3Server) -> None:
    url = f"s3://{new_bucket_name()}/ckpt/checkpoint_version.txt"
    with pytest.raises(DataNotFound, match="does not exist"):
        fs.read_text(url)
    with pytest.raises(DataNotFound, match="NoSuchBucket"):
        fs.write_text_atomic(url, "1\n")  # never creates the bucket
    assert not fs.exists(url)


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A second moto server that checks credentials (moto's INITIAL_NO_AUTH_ACTION_COUNT=0)."""
    server = S3Server(extra_env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"})
    server.start()
    yield server
    server.stop()


def test_invalid_credentials_are_access_denied_without_secrets(auth_server: S3Server) -> None:
    options = {"endpoint_url": auth_server.endpoint_url, "key": "AKIAEXAMPLEKEYID", "secret": "s3cr3t-value"}
    for call in (
        lambda: fs.read_text("s3://bkt/a.txt", options),
        lambda: fs.write_text_atomic("s3://bkt/a.txt", "x", options),
    ):
        with pytest.raises(AccessDenied) as info:
            call()
        message = str(info.value)
        assert message.startswith("s3://bkt/a.txt: access denied")
        assert "AWS_ACCESS_KEY_ID" in message and "'key', 'secret'" in message
        assert "s3cr3t-value" not in message and "AKIAEXAMPLEKEYID" not in message
        assert isinstance(info.value, PermissionError) and not getattr(info.value, "transient", False)


def test_invalid_credentials_fail_at_the_first_attempt(auth_server: S3Server) -> None:
    options = {"endpoint_url": auth_server.endpoint_url, "key": "AKIAEXAMPLEKEYID", "secret": "s3cr3t-value"}
    url = "s3://bkt/attempts.txt"
    events = fs.resolve(url, options)[0].s3.meta.events
    sent: list[str] = []
    events.register("before-send.s3", lambda request, **_: sent.append(request.method), unique_id="count")
    try:
        with pytest.raises(AccessDenied, match=r"^s3://bkt/attempts.txt: access denied"):
            fs.read_text(url, options)
    finally:
        events.unregister("before-send.s3", unique_id="count")
    assert len(sent) == 1  # a 403 is never retried (botocore, s3fs and the task policy alike)


def test_missing_credentials_are_access_denied(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(AccessDenied, match="AWS_SECRET_ACCESS_KEY"):
        fs.read_text(f"s3://{new_bucket_name()}/a.txt", {"skip_instance_cache": True, **FAST_FAIL_OPTIONS})


def test_unreachable_loopback_server_is_permanent_and_fails_fast(s3_server: S3Server) -> None:
    """A refused loopback connection: nothing listens there, so it is not worth retrying."""
    options = {"endpoint_url": f"http://127.0.0.1:{free_port()}"}  # botocore's default retries
    for call in (
        lambda: fs.read_text("s3://bkt/a.txt", options),
        lambda: fs.write_text_atomic("s3://bkt/a.txt", "x", options),
    ):
        with pytest.raises(StorageUnreachable, match="connection refused by the S3 endpoint 127.0.0.1") as info:
            call()
        assert info.value.transient is False and str(info.value).startswith("s3://bkt/")
    # Attempts are counted in tests/storage/test_fail_fast.py.


def test_create_exclusive_creates_once(root: StorePath) -> None:
    url = str(root / "ckpt" / "lease.json")
    assert fs.create_exclusive(url, '{"run": "a"}') is True
    assert fs.create_exclusive(url, '{"run": "b"}') is False
    assert (root / "ckpt" / "lease.json").read_text() == '{"run": "a"}'
    assert [p.name for p in (root / "ckpt").iterdir()] == ["lease.json"]  # no temporary left
    fs.remove(url)
    assert fs.create_exclusive(url, '{"run": "b"}') is True
