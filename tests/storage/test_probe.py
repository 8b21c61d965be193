"""storage.probe: one quick request per bucket before a run, on a real S3 server (moto) and a closed port."""

from __future__ import annotations

import socket

import pytest

from storage.errors import BadUrlError, StorageUnreachable
from storage.probe import check_reachable
from tasks._policies import is_transient

SECRET = "probe-secret-4kQ2"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_local_paths_are_not_probed(tmp_path) -> None:
    assert check_reachable([str(tmp_path / "a"), f"file://{tmp_path}/b"]) == []


def test_one_probe_per_bucket_and_a_missing_key_is_fine(s3_bucket: str) -> None:
    urls = [f"s3://{s3_bucket}/data", f"s3://{s3_bucket}/data/edges", f"s3://{s3_bucket}/model", "/tmp/local"]
    assert check_reachable(urls) == [f"s3://{s3_bucket}/data"]


def test_a_closed_port_fails_at_once_naming_url_and_endpoint_not_the_secret() -> None:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(StorageUnreachable) as caught:
        check_reachable(["s3://pbg-nowhere/data"], {"endpoint_url": endpoint, "key": "AKIAX", "secret": SECRET})
    message = str(caught.value)
    assert message.startswith("s3://pbg-nowhere/data: cannot reach the S3 endpoint " + endpoint)
    assert SECRET not in message
    assert not is_transient(caught.value)  # the tasks must not spend a minute retrying it


def test_a_bad_bucket_name_is_a_url_error() -> None:
    with pytest.raises(BadUrlError):
        check_reachable(["s3://Bad_Bucket/x"])


def test_missing_credentials_fail_at_once_as_access_denied(
    s3_server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from storage.errors import AccessDenied

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(AccessDenied) as caught:
        check_reachable([f"s3://{s3_bucket}/data"], {"endpoint_url": s3_server.endpoint_url})
    assert f"s3://{s3_bucket}/data" in str(caught.value)
    assert not is_transient(caught.value)


def test_largest_local_bucket_reads_the_edge_counts_of_every_path(tmp_path) -> None:
    import torch

    from pbg_core.edgelist import EdgeList
    from pbg_core.types import Bucket
    from storage.edges import EdgeStore
    from storage.probe import largest_local_bucket

    def save(path, bucket, n):
        ids = torch.arange(n)
        EdgeStore(str(path)).save(bucket, EdgeList.from_tensors(ids, ids, torch.zeros(n, dtype=torch.long)))

    save(tmp_path / "a", Bucket(0, 0), 30)
    save(tmp_path / "a", Bucket(0, 1), 70)
    save(tmp_path / "b", Bucket(1, 1), 50)
    (tmp_path / "a" / "notes.txt").write_text("not an edge file")
    assert largest_local_bucket([str(tmp_path / "a"), f"file://{tmp_path / 'b'}"]) == 70


def test_largest_local_bucket_is_only_a_hint(tmp_path) -> None:
    from storage.probe import largest_local_bucket

    assert largest_local_bucket(["s3://some-bucket/edges"]) is None  # remote: not read
    assert largest_local_bucket([str(tmp_path / "missing")]) is None  # the run's checks say what is wrong
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "edges_0_0.h5").write_bytes(b"not hdf5")
    assert largest_local_bucket([str(tmp_path / "bad")]) is None
    assert largest_local_bucket([]) == 0
