"""tasks.cluster_members: who trains a run, on real ``dask scheduler`` / ``dask worker`` processes.

A worker that joins during the run is checked before it gets a bucket (one running modified
code, started from a copy of the sources with one line changed, is refused, saying why); a
worker that leaves between buckets is reported once. The credentials of ``storage_options``
are left out of what the workers are sent when their own environment holds the same ones.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dask_processes import DaskProcesses, modified_sources
from distributed import Client

from pbg_core.config import parse_config
from tasks.cluster_members import Members, machine_config
from tasks.cluster_sessions import live_workers
from tasks.worker_checks import source_digest

FIT = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
KEY, SECRET = "AKIAWORKERSOWNKEY", "workers-own-s3cr3t-7d1f"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    processes = DaskProcesses(tmp_path / "dask")
    processes.directory.mkdir()
    processes.start_scheduler()
    yield processes
    processes.stop()


def wait_for(condition: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_late_workers_are_checked_before_any_bucket_and_a_lost_one_is_reported_once(
    cluster: DaskProcesses, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = cluster.start_worker(FIT)
    with Client(cluster.address, set_as_default=False) as client:
        client.wait_for_workers(1, timeout=60)
        members = Members(admitted=set(live_workers(client) or ()))
        (original,) = members.admitted
        cluster.start_worker({**FIT, "PYTHONPATH": str(modified_sources(tmp_path / "modified"))})
        cluster.start_worker(FIT)
        client.wait_for_workers(3, timeout=60)
        digests = client.run(source_digest)
        (modified,) = [w for w, digest in digests.items() if digest != source_digest()]
        (fit,) = set(digests) - {original, modified}
        with caplog.at_level(logging.INFO, logger="tasks"):
            ready = members.refresh(client, live_workers(client), busy=())
        assert ready == sorted([original, fit]) and modified in members.refused
        assert (
            f"Dask worker {modified} joined during the run and gets no bucket: it runs pbg-flow sources " in caplog.text
        )
        assert f"Dask worker {fit} joined during the run: same code, fit to train" in caplog.text
        caplog.clear()
        os.killpg(first.pid, signal.SIGKILL)
        wait_for(lambda: original not in (live_workers(client) or {original}))
        with caplog.at_level(logging.INFO, logger="tasks"):
            assert members.refresh(client, live_workers(client), busy=[original]) == [fit]  # its bucket task reports it
            assert "left the cluster" not in caplog.text
            members.refresh(client, live_workers(client), busy=())
            members.refresh(client, live_workers(client), busy=())
        left = [r.getMessage() for r in caplog.records if "left the cluster" in r.getMessage()]
        assert left == [
            f"Dask worker {original} left the cluster between buckets: no work is lost with it (every bucket it "
            "trained was saved and recorded); the run goes on with 1 worker(s)"
        ]
        assert members.lost == {original} and members.admitted == {fit}


@pytest.mark.parametrize("same", [True, False])
def test_credentials_the_workers_hold_are_not_sent_and_others_are_with_a_warning(
    cluster: DaskProcesses, make_config: Any, same: bool, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.start_worker({**FIT, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET})
    options = {"key": KEY, "secret": SECRET if same else "another-secret", "endpoint_url": "http://127.0.0.1:9"}
    config = parse_config(make_config(storage_options=options))
    with Client(cluster.address, set_as_default=False) as client:
        client.wait_for_workers(1, timeout=60)
        workers = sorted(live_workers(client) or ())
        with caplog.at_level(logging.INFO, logger="tasks"):
            sent, check = machine_config(config, client, workers, cluster.address, local=False)
    assert sent.storage_options is not None and sent.storage_options.endpoint_url == "http://127.0.0.1:9"
    revealed = sent.storage_options_for_fs()
    if same:
        assert "key" not in revealed and "secret" not in revealed and check is not None
        assert "are not sent to the Dask workers: each resolves the same ones" in caplog.text
        assert "cross the scheduler connection" not in caplog.text
    else:
        assert revealed["secret"] == "another-secret" and check is None
        assert (
            f"storage_options key, secret cross the scheduler connection {cluster.address} to every Dask worker with "
            f"each bucket, in clear text (only tls:// encrypts it) (Dask worker(s) {workers[0]} do not resolve the "
            "same credentials from their own environment); anyone who reaches the scheduler's port can run code "
            "on the workers" in caplog.text
        )
    assert SECRET not in caplog.text and "another-secret" not in caplog.text
