"""Tests for storage.fs.urls: URL resolution, S3 URL checks and error translation (credentials, unreachable servers)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from fsspec.core import url_to_fs
from s3_server import FAST_FAIL_OPTIONS

from bench.lib.s3_server import S3Server, free_port, new_bucket_name
from storage.errors import AccessDenied, BadUrlError, DataNotFound, FilesystemUnavailable, StorageUnreachable
from storage.fs import atomic, reads, urls


def test_resolve_plain_path_and_file_url(tmp_path: Path) -> None:
    for url in (str(tmp_path), f"file://{tmp_path}"):
        filesystem, path = urls.resolve(url)
        assert urls.is_local(filesystem)
        assert path == str(tmp_path)


def test_join_url_keeps_scheme() -> None:
    assert urls.join_url("s3://b/ckpt/", "epoch_5", "model.v5.h5") == "s3://b/ckpt/epoch_5/model.v5.h5"
    assert urls.join_url("file:///d", "x.txt") == "file:///d/x.txt"
    assert urls.join_url("/d", "x.txt") == "/d/x.txt"
    assert urls.join_url("/d") == "/d"


def test_an_unknown_scheme_is_named_with_the_known_ones(tmp_path: Path) -> None:
    problem = urls.filesystem_problem("foo://x/ckpt", "checkpoint_path")
    assert problem == (
        "checkpoint_path's URL scheme 'foo://' is unknown: no filesystem is registered for it; give a local "
        "path or a URL of a scheme fsspec knows (file://, s3://, gs://, az://, hdfs://, ...)"
    )
    with pytest.raises(FilesystemUnavailable) as info:  # any URL any store resolves: without its field
        reads.read_text("foo://x/ckpt/checkpoint_version.txt")
    assert str(info.value).startswith("foo://x/ckpt/checkpoint_version.txt: the URL scheme 'foo://' is unknown")
    for usable in (str(tmp_path), f"file://{tmp_path}", "s3://bucket/key", "memory://x", "local:///x"):
        assert urls.filesystem_problem(usable) is None


def test_a_filesystem_whose_package_is_missing_names_it() -> None:
    # fsspec's own registry mechanism, as gcsfs/adlfs are registered: a class in a package not installed.
    fsspec.register_implementation("pbgtest", "pbg_no_such_package.TestFileSystem", errtxt="Install it", clobber=True)
    problem = urls.filesystem_problem("simplecache::pbgtest://bucket/key", "edge_paths[1]")
    assert problem == (
        "edge_paths[1]'s URL scheme 'pbgtest://' cannot be used here: the Python package 'pbg_no_such_package' "
        "is not installed (pip install pbg_no_such_package; fsspec says: Install it)"
    )
    with pytest.raises(FilesystemUnavailable, match=r"^pbgtest://b/k: input 2's URL scheme 'pbgtest://' cannot"):
        urls.check_filesystems([("input 1", "/tmp/x.tsv"), ("input 2", "pbgtest://b/k")])


@pytest.mark.skipif(importlib.util.find_spec("gcsfs") is not None, reason="gcsfs is installed here")
def test_gs_without_gcsfs_says_to_install_it() -> None:
    problem = urls.filesystem_problem("gs://bucket/ckpt", "checkpoint_path")
    assert problem is not None and problem.startswith(
        "checkpoint_path's URL scheme 'gs://' cannot be used here: the Python package 'gcsfs' is not installed "
        "(pip install gcsfs;"
    )


def test_hdfs_without_its_native_client_names_what_is_missing() -> None:
    pyarrow = pytest.importorskip("pyarrow", reason="without pyarrow hdfs:// is a missing package, tested above")
    if pyarrow.have_libhdfs():
        pytest.skip("Hadoop's native client loads here")
    problem = urls.filesystem_problem("hdfs://namenode:8020/ckpt", "checkpoint_path")
    assert problem is not None
    assert problem.startswith(
        "checkpoint_path's URL scheme 'hdfs://' cannot be used here: pyarrow cannot load Hadoop's native client"
    )
    assert "libjvm.so" in problem and "libhdfs.so" in problem and "dlopen" not in problem


@pytest.mark.parametrize("url", ["s3://", "s3:///key.txt", "s3://Bad_Bucket/k", "s3://ab/k", "s3://a..b/k"])
def test_bad_s3_url_is_bad_url_error(url: str) -> None:
    with pytest.raises(BadUrlError, match="expected s3://<bucket>/<key>") as info:
        reads.read_text(url)
    assert isinstance(info.value, ValueError) and str(info.value).startswith(url)


def test_missing_bucket_is_data_not_found(s3_server: S3Server) -> None:
    url = f"s3://{new_bucket_name()}/ckpt/checkpoint_version.txt"
    with pytest.raises(DataNotFound, match="does not exist"):
        reads.read_text(url)
    with pytest.raises(DataNotFound, match="NoSuchBucket"):
        atomic.write_text_atomic(url, "1\n")  # never creates the bucket
    assert not reads.exists(url)


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
        lambda: reads.read_text("s3://bkt/a.txt", options),
        lambda: atomic.write_text_atomic("s3://bkt/a.txt", "x", options),
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
    events = urls.resolve(url, options)[0].s3.meta.events
    sent: list[str] = []
    events.register("before-send.s3", lambda request, **_: sent.append(request.method), unique_id="count")
    try:
        with pytest.raises(AccessDenied, match=r"^s3://bkt/attempts.txt: access denied"):
            reads.read_text(url, options)
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
        reads.read_text(f"s3://{new_bucket_name()}/a.txt", {"skip_instance_cache": True, **FAST_FAIL_OPTIONS})


def test_unreachable_loopback_server_is_permanent_and_fails_fast(s3_server: S3Server) -> None:
    """A refused loopback connection: nothing listens there, so it is not worth retrying."""
    options = {"endpoint_url": f"http://127.0.0.1:{free_port()}"}  # botocore's default retries
    for call in (
        lambda: reads.read_text("s3://bkt/a.txt", options),
        lambda: atomic.write_text_atomic("s3://bkt/a.txt", "x", options),
    ):
        with pytest.raises(StorageUnreachable, match="connection refused by the S3 endpoint 127.0.0.1") as info:
            call()
        assert info.value.transient is False and str(info.value).startswith("s3://bkt/")


def test_server_stop_is_unreachable_and_start_resumes_on_same_port(s3_server: S3Server, s3_bucket: str) -> None:
    url = f"s3://{s3_bucket}/ckpt/checkpoint_version.txt"
    atomic.write_text_atomic(url, "3\n")
    port = s3_server.port
    s3_server.stop()
    try:
        with pytest.raises(StorageUnreachable):  # refused on a loopback address: not retried
            reads.read_text(url)
    finally:
        s3_server.start()
    assert s3_server.port == port and s3_server.running
    # moto keeps no state across restarts: the bucket is gone, which is a plain DataNotFound.
    with pytest.raises(DataNotFound):
        reads.read_text(url)
    filesystem, _ = url_to_fs(url, skip_instance_cache=True)
    filesystem.mkdir(s3_bucket)
    atomic.write_text_atomic(url, "4\n")  # the cached filesystem object works again after the restart
    assert reads.read_text(url) == "4\n"
