"""Credentials of ``storage_options`` never cross the scheduler connection when the workers hold them.

A real cluster (``dask scheduler`` and two ``dask worker`` on 127.0.0.1) whose workers have
credentials in their environment; the config's ``storage_options`` carries the same ones. A
scheduler plugin (tests/dask_payloads.py) keeps the pickled payload of every task the run
submits: no payload holds the key or the secret, while the run's non-secret options are there
(what the workers are sent is looked at, not left out). The paths are local (``shared_paths``),
where fsspec ignores credentials, so the whole flow runs without S3 (one epoch: 13-40 s here).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dask_payloads import PayloadRecorder, echo, recorded_payloads
from dask_processes import DaskProcesses
from distributed import Client

from flows.train import pbg
from pbg_core.config import parse_config

FIT = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
KEY, SECRET = "AKIAPLANTEDCLUSTERKEY", "planted-cluster-s3cr3t-41c9"
ENDPOINT = "http://127.0.0.1:9/not-a-secret"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    """A scheduler recording payloads, and two workers holding the credentials in their environment."""
    processes = DaskProcesses(tmp_path / "dask")
    processes.directory.mkdir()
    processes.start_scheduler()
    for _ in range(2):
        processes.start_worker({**FIT, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET})
    with Client(processes.address, set_as_default=False) as client:
        client.register_plugin(PayloadRecorder())
    yield processes
    processes.stop()


def test_credentials_the_workers_hold_are_in_no_task_payload(
    cluster: DaskProcesses, make_config: Any, graph_4x4: Any
) -> None:
    options = {"key": KEY, "secret": SECRET, "endpoint_url": ENDPOINT}
    raw = make_config(
        "ckpt",
        data=graph_4x4,
        num_epochs=1,
        num_machines=2,
        dask_address=cluster.address,
        shared_paths=True,
        storage_options=options,
    )
    assert pbg(config=parse_config(raw))["version"] == 1
    with Client(cluster.address, set_as_default=False) as client:
        payloads = client.run_on_scheduler(recorded_payloads)
        buckets = [p for p in payloads if b"train_on_machine" in p]
        assert len(buckets) >= 16  # every bucket of the epoch went through the scheduler
        assert all(ENDPOINT.encode() in p for p in buckets)  # the run's options are in them
        assert not [p for p in payloads if KEY.encode() in p or SECRET.encode() in p]
        # The recorder's own check: a secret that is sent shows in the bytes it keeps.
        assert client.submit(echo, f"{KEY}/{SECRET}", pure=False).result(timeout=60) == f"{KEY}/{SECRET}"
        assert any(SECRET.encode() in p for p in client.run_on_scheduler(recorded_payloads))
