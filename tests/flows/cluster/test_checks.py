"""flows.cluster.checks: the checks of a real Dask cluster (``dask scheduler`` / ``dask worker`` on 127.0.0.1).

Also the ``dask_address`` entries refusing a scheme other than tcp:// and tls:// before anything
connects: the flow's check, the preflight probe and ``pbg train -p dask_address=...``.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _cli import cli_environment, run_pbg
from dask_processes import DaskProcesses, modified_sources, spawn_child
from disk_state import changes, tree_state
from distributed import Client
from process_state import running

from bench.lib.s3_server import free_port
from flows.cli.service_checks import check_dask_scheduler
from flows.cluster.checks import ClusterError, check_cluster, local_cluster
from tasks.worker_checks import DAEMON_FIX, package_version, source_digest

NOT_DASK = ["http://127.0.0.1:{port}", "127.0.0.1:{port}", "inproc://127.0.0.1/1/2", "ucx://127.0.0.1:{port}"]

FIT = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}


@pytest.fixture(autouse=True)
def prefect_harness() -> Iterator[None]:
    """No Prefect server here (overrides the directory's session fixture): nothing runs a flow."""
    yield


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    """A scheduler without workers; the test starts the ones it needs."""
    processes = DaskProcesses(tmp_path)
    processes.start_scheduler()
    yield processes
    processes.stop()


def test_a_fit_cluster_passes_and_its_workers_can_spawn(cluster: DaskProcesses) -> None:
    cluster.start_worker(FIT)
    cluster.start_worker(FIT)
    info = check_cluster(cluster.address, machines=2)
    assert info.address == cluster.address and len(info.workers) == 2
    assert all(worker.startswith("tcp://127.0.0.1:") for worker in info.workers)
    with Client(cluster.address, set_as_default=False) as client:
        assert client.submit(spawn_child, pure=False).result(timeout=60) == 0


def test_too_few_workers_name_the_count_and_num_machines(cluster: DaskProcesses) -> None:
    cluster.start_worker(FIT)
    with pytest.raises(ClusterError, match=r"1 worker\(s\) joined within 3 s, but num_machines is 2; start more"):
        check_cluster(cluster.address, machines=2, timeout=3)


def test_a_daemonic_worker_is_named_with_the_fix(cluster: DaskProcesses) -> None:
    cluster.start_worker()  # Dask's default: a daemonic worker process under its nanny
    with pytest.raises(ClusterError) as caught:
        check_cluster(cluster.address, machines=1)
    assert "cannot start the HOGWILD trainer processes" in str(caught.value) and DAEMON_FIX in str(caught.value)
    daemonic = pytest.raises(AssertionError, match="daemonic processes are not allowed to have children")
    with Client(cluster.address, set_as_default=False) as client, daemonic:  # the premise: spawning fails there
        client.submit(spawn_child, pure=False).result(timeout=60)


def test_a_worker_with_another_version_is_named(cluster: DaskProcesses, tmp_path: Path) -> None:
    other = tmp_path / "other" / "pbg_flow-9.9.9.dist-info"
    other.mkdir(parents=True)
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: pbg-flow\nVersion: 9.9.9\n")
    cluster.start_worker({**FIT, "PYTHONPATH": str(other.parent)})
    expected = package_version()
    with pytest.raises(
        ClusterError,
        match=rf"^dask_address {cluster.address}: Dask worker tcp://127.0.0.1:\d+ runs pbg-flow 9.9.9, this "
        rf"process {expected}; install pbg-flow=={expected} on the scheduler and every worker$",
    ):
        check_cluster(cluster.address, machines=1)


def test_an_address_nothing_answers_fails_fast_naming_it() -> None:
    address = f"tcp://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(
        ClusterError, match=rf"^dask_address {address}: no Dask scheduler answered \(.*; waited up to 2 s\); start one"
    ):
        check_cluster(address, machines=2, timeout=2)
    assert time.monotonic() - started < 20


def test_a_malformed_address_says_what_is_expected() -> None:
    with pytest.raises(
        ClusterError, match=r"^dask_address 'nowhere' has no scheme; it must start with tcp:// or tls://"
    ):
        check_cluster("nowhere", machines=2, timeout=2)


def test_the_local_cluster_is_fit_and_leaves_nothing_running() -> None:
    with local_cluster(2) as address:
        assert address.startswith("tcp://127.0.0.1:")
        assert len(check_cluster(address, machines=2).workers) == 2
        with Client(address, set_as_default=False) as client:
            pids = list(client.run(os.getpid).values())
            assert client.submit(spawn_child, pure=False).result(timeout=60) == 0
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(running(pid) for pid in pids)


def test_a_port_where_something_else_answers_is_not_taken_for_a_scheduler() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    address = f"tcp://127.0.0.1:{server.server_address[1]}"
    try:
        started = time.monotonic()
        with pytest.raises(ClusterError, match=rf"^dask_address {address}: something answered but not a Dask"):
            check_cluster(address, machines=2, timeout=3)
        assert time.monotonic() - started < 10
    finally:
        server.shutdown()
        server.server_close()


def test_the_preflight_probe_names_the_address_before_any_server_starts(cluster: DaskProcesses) -> None:
    check_dask_scheduler(cluster.address)  # a scheduler answers: nothing raised, no worker needed
    check_dask_scheduler(None)
    address = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises(ClusterError, match=rf"^dask_address {address}: no Dask scheduler answered"):
        check_dask_scheduler(address, timeout=2)


def test_a_worker_running_other_code_at_the_same_version_is_named_with_both_sources(
    cluster: DaskProcesses, tmp_path: Path
) -> None:
    other = modified_sources(tmp_path / "modified")
    cluster.start_worker({**FIT, "PYTHONPATH": str(other)})
    with Client(cluster.address, set_as_default=False) as client:
        client.wait_for_workers(1, timeout=60)
        theirs = next(iter(client.run(source_digest).values()))
        assert client.run(package_version) == {w: package_version() for w in client.run(os.getpid)}  # same version
    assert theirs != source_digest()
    with pytest.raises(
        ClusterError,
        match=rf"^dask_address {cluster.address}: Dask worker tcp://127.0.0.1:\d+ runs pbg-flow sources {theirs}, "
        rf"this process {source_digest()}: install the same code on every machine$",
    ):
        check_cluster(cluster.address, machines=1)


class Listener:
    """A TCP port that counts the connections made to it (nothing may connect to a refused address)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.sock.settimeout(0.1)
        self.running = True
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.sock.close()


@pytest.mark.parametrize("template", NOT_DASK)
def test_an_address_of_another_scheme_is_refused_in_one_line_before_anything_connects(template: str) -> None:
    listener = Listener()
    address = template.format(port=listener.port)
    try:
        for check in (lambda: check_cluster(address, machines=2, timeout=2), lambda: check_dask_scheduler(address)):
            with pytest.raises(ClusterError) as caught:
                check()
            message = str(caught.value)
            assert "\n" not in message and repr(address) in message and "tcp:// or tls://" in message
            assert "something answered" not in message
    finally:
        listener.close()
    assert listener.accepted == 0


def test_pbg_train_refuses_a_dask_address_of_another_scheme_naming_it(
    config_for: Any, graph_4x4: Any, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.json").write_text(
        json.dumps(config_for(graph_4x4, work / "ckpt", num_machines=2, shared_paths=True))
    )
    before = tree_state(work)
    env = cli_environment(tmp_path / "home")
    done = run_pbg(env, work, "train", "-p", "dask_address=http://10.0.0.1:8786", "config.json")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "pbg train: error: config in config.json: dask_address 'http://10.0.0.1:8786': scheme http:// is not "
        "allowed; allowed: tcp:// or tls:// (a Dask scheduler's address, e.g. tcp://10.0.0.1:8786; tls:// for a "
        "scheduler started with --protocol tls)"
    )
    assert changes(before, tree_state(work)) == []
