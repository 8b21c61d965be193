"""The ``pbg`` flow on a cluster of real ``dask scheduler`` / ``dask worker`` processes, and its faults.

The workers are started from their command lines on 127.0.0.1 (tests/dask_processes.py) and
read the planted 4x4 graph from this machine's disk (``shared_paths: true``: they share it).
A worker killed with SIGKILL mid-run gives its bucket to the other; a killed scheduler fails
the run within a minute, naming the address, and a rerun on a new cluster resumes it; a worker
running other code that joins mid-run gets no bucket.

With ``PBG_SLOW_TESTS=1``: the worker with other code joining mid-run (its check on real
processes runs by default in tests/tasks/test_cluster_members.py); Ctrl-C of ``pbg train`` while
buckets of tens of seconds train, which ends the command and frees the workers at once; and the
cluster with nothing shared but S3: every path on the moto
server behind the fault proxy of tests/s3_proxy.py (workers and coordinator alike, one botocore
retry per request as in tests/flows/test_s3_faults.py, so that faults reach the task retries).
An outage of 10 s mid-pass is retried, by the buckets' tasks and the coordinator's steps, and
the run completes with a complete checkpoint. A denied access (by default) is no transient
fault: the run fails in one line, without retrying it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
from _cli import PBG, cli_environment
from _random_graph import random_edges, random_graph_config
from _signals import signal_when
from dask_processes import DaskProcesses, modified_sources
from distributed import Client
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId
from s3_proxy import S3Proxy

from bench.lib.s3_server import S3Server
from flows.train import pbg
from pbg_core.config import parse_config
from pbg_core.errors import ClusterError
from storage.checkpoints import CheckpointStore
from storage.errors import AccessDenied
from storage.stats_log import StatsLog
from tasks.machines import open_machines

FIT = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
ONE_BOTOCORE_RETRY = {"AWS_MAX_ATTEMPTS": "2", "AWS_RETRY_MODE": "legacy"}
OUTAGE_S = 10.0
slow = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    """A scheduler and two workers able to start processes."""
    processes = DaskProcesses(tmp_path / "dask")
    processes.directory.mkdir()
    processes.start_scheduler()
    processes.start_worker(FIT)
    processes.start_worker(FIT)
    yield processes
    processes.stop()


@pytest.fixture
def raw(make_config: Any, graph_4x4: Any, cluster: DaskProcesses) -> dict[str, Any]:
    return make_config(
        "ckpt", data=graph_4x4, num_epochs=3, num_machines=2, dask_address=cluster.address, shared_paths=True
    )


def bucket_rows(checkpoint: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (checkpoint / "training_stats.json").read_text().splitlines()]
    return [row for row in rows if "eval_stats_chunk_avg" not in row]


def kill_when(condition: Any, action: Any, timeout: float = 120.0) -> threading.Thread:
    """Run ``action`` once ``condition()`` holds (polled every 20 ms), in a thread."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                action()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def recorded(checkpoint: Path) -> int:
    """Buckets recorded in the open version's progress record (0 when there is none)."""
    records = sorted((checkpoint / "progress").glob("v*.json")) if (checkpoint / "progress").exists() else []
    try:
        return max((json.loads(p.read_text())["done"] for p in records), default=0)
    except (OSError, ValueError):
        return 0


@pytest.mark.slow
def test_a_run_on_command_line_workers_completes(raw: dict[str, Any]) -> None:
    result = pbg(config=parse_config(raw))
    rows = bucket_rows(Path(raw["checkpoint_path"]))
    assert result["version"] == 3 and len(rows) == 48
    assert len({r["machine"] for r in rows}) == 2  # both workers trained


@pytest.mark.slow
def test_a_worker_killed_mid_run_gives_its_bucket_to_the_other(raw: dict[str, Any], cluster: DaskProcesses) -> None:
    checkpoint = Path(raw["checkpoint_path"])
    victim = cluster.processes[1]  # the first worker's nanny and worker: its process group

    def kill() -> None:
        os.killpg(victim.pid, signal.SIGKILL)

    watcher = kill_when(lambda: recorded(checkpoint) >= 3, kill)
    result = pbg(config=parse_config(raw))
    watcher.join(timeout=1)
    assert victim.poll() is not None  # it was killed during the run
    rows = bucket_rows(checkpoint)
    assert result["version"] == 3
    indices = [r["index"] for r in rows]
    assert sorted(indices) == list(range(48))  # every bucket once: none lost, none recorded twice
    store = CheckpointStore(str(checkpoint))
    for part in range(4):
        assert store.load_embeddings("node", part, 3)[0].shape == (store.embeddings_shape("node", part, 3)[0], 16)


@pytest.mark.slow
def test_a_lost_scheduler_fails_the_run_within_a_minute_and_a_new_cluster_resumes_it(
    raw: dict[str, Any], cluster: DaskProcesses, tmp_path: Path
) -> None:
    checkpoint = Path(raw["checkpoint_path"])
    scheduler = cluster.processes[0]
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        os.killpg(scheduler.pid, signal.SIGKILL)

    kill_when(lambda: recorded(checkpoint) >= 2 or CheckpointStore(str(checkpoint)).read_version() >= 1, kill)
    with pytest.raises(ClusterError, match=rf"dask_address {cluster.address}: lost the Dask scheduler"):
        pbg(config=parse_config(raw))
    assert killed_at and time.monotonic() - killed_at[0] < 60
    cluster.stop()
    committed = CheckpointStore(str(checkpoint)).read_version()
    again = DaskProcesses(tmp_path / "dask-again")
    again.directory.mkdir()
    try:
        again.start_scheduler()
        again.start_worker(FIT)
        again.start_worker(FIT)
        result = pbg(config=parse_config({**raw, "dask_address": again.address}))
    finally:
        again.stop()
    assert result["version"] == 3 and committed < 3
    assert sorted(r["index"] for r in bucket_rows(checkpoint)) == list(range(48))


@slow
def test_a_worker_with_other_code_joining_mid_run_gets_no_bucket(
    raw: dict[str, Any], cluster: DaskProcesses, tmp_path: Path
) -> None:
    checkpoint = Path(raw["checkpoint_path"])
    other = str(modified_sources(tmp_path / "modified"))
    started: list[Any] = []
    kill_when(
        lambda: recorded(checkpoint) >= 2, lambda: started.append(cluster.start_worker({**FIT, "PYTHONPATH": other}))
    )
    with run_logs() as lines:
        result = pbg(config=parse_config(raw))
    assert started and started[0].poll() is None  # it joined during the run, and still runs
    refused = [line for line in lines if "joined during the run and gets no bucket: it runs pbg-flow sources" in line]
    assert len(refused) == 1, lines  # said once, with the reason
    rows = bucket_rows(checkpoint)
    assert result["version"] == 3 and sorted(r["index"] for r in rows) == list(range(48))
    assert len({r["machine"] for r in rows}) == 2  # only the two checked workers trained


@contextmanager
def run_logs() -> Iterator[list[str]]:
    """The messages of the flow's and tasks' run loggers while the block runs."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep(logging.INFO)
    prefect_logger = logging.getLogger("prefect")
    prefect_logger.addHandler(handler)
    try:
        yield lines
    finally:
        prefect_logger.removeHandler(handler)


def upload(server: S3Server, local: Path, bucket: str, prefix: str) -> None:
    """Copy a local directory to ``s3://bucket/prefix/`` straight to moto (not through the proxy)."""
    client = boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1")
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")


@pytest.fixture
def s3_cluster(
    s3_proxy: S3Proxy, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[DaskProcesses]:
    """Two workers that reach S3 only through the proxy, with one botocore retry (the coordinator too)."""
    for name, value in ONE_BOTOCORE_RETRY.items():
        monkeypatch.setenv(name, value)
    processes = DaskProcesses(tmp_path / "dask-s3")
    processes.directory.mkdir()
    processes.start_scheduler()
    env = {**FIT, **s3_server.env, **ONE_BOTOCORE_RETRY, "AWS_ENDPOINT_URL": s3_proxy.endpoint_url}
    processes.start_worker(env)
    processes.start_worker(env)
    yield processes
    processes.stop()


@pytest.fixture
def s3_raw(s3_cluster: DaskProcesses, s3_server: S3Server, s3_bucket: str, graph_4x4: Any, config_for: Any) -> dict:
    upload(s3_server, Path(graph_4x4.entity_path), s3_bucket, "data")
    train = Path(graph_4x4.train_path).relative_to(graph_4x4.entity_path).as_posix()
    return config_for(
        graph_4x4,
        f"s3://{s3_bucket}/ckpt",
        entity_path=f"s3://{s3_bucket}/data",
        edge_paths=[f"s3://{s3_bucket}/data/{train}"],
        num_epochs=2,
        num_machines=2,
        dask_address=s3_cluster.address,
    )


def on_progress_record(count: int) -> Any:
    """A proxy trigger: the ``count``-th bucket recorded (a PUT of the pass's progress record), mid-pass."""
    seen = [0]

    def match(method: str, path: str, status: int) -> bool:
        if method == "PUT" and "/ckpt/progress/v" in path and path.endswith(".json") and status == 200:
            seen[0] += 1
            return seen[0] == count
        return False

    return match


def task_runs(flow_run_id: Any) -> list[Any]:
    """Every task run of the flow run and of its iterations' subflow runs."""
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]))
        )
        ids = [flow_run_id, *(child.id for child in children)]
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))


@slow
def test_a_10_s_s3_outage_mid_pass_is_retried_and_the_run_completes(s3_raw: dict, s3_proxy: S3Proxy) -> None:
    s3_proxy.when(on_progress_record(3), lambda: s3_proxy.down(OUTAGE_S, mode="reset"))
    state = pbg(config=parse_config(s3_raw), return_state=True)
    result = state.result()
    assert s3_proxy.counters().get("outage") == 1
    checkpoint = s3_raw["checkpoint_path"]
    store = CheckpointStore(checkpoint)
    assert result["version"] == 2 and store.read_version() == 2
    rows = [r for r in StatsLog(checkpoint).read() if "eval_stats_chunk_avg" not in r]
    assert sorted(r["index"] for r in rows) == list(range(32))  # every bucket once: none lost, none twice
    for part in range(4):
        embeddings, _ = store.load_embeddings("node", part, 2)
        assert embeddings.shape[1] == 16
    retried = [run.name for run in task_runs(state.state_details.flow_run_id) if run.run_count > 1]
    assert any(name.startswith("train bucket (") for name in retried), retried  # the bucket's own retry


def test_a_denied_access_mid_pass_fails_the_run_in_one_line_without_retries(s3_raw: dict, s3_proxy: S3Proxy) -> None:
    s3_proxy.when(on_progress_record(3), lambda: s3_proxy.error_share(1.0, status=403, code="AccessDenied"))
    state = pbg(config=parse_config(s3_raw), return_state=True)
    assert state.is_failed()
    with pytest.raises(AccessDenied) as caught:
        state.result()
    assert "\n" not in str(caught.value) and str(caught.value).startswith("s3://")
    buckets = [run for run in task_runs(state.state_details.flow_run_id) if run.name.startswith("train bucket (")]
    assert buckets and all(run.run_count == 1 for run in buckets)


def heavy_graph(root: Path) -> Path:
    """config.json of a random graph whose buckets each train for tens of seconds here (1024 dims,
    1000 negatives of each kind per edge), imported with ``pbg import``."""
    root.mkdir(parents=True, exist_ok=True)
    random_edges(root / "edges.tsv", num_edges=400_000, num_nodes=20_000)
    config = json.loads(random_graph_config(root, dimension=1024).read_text())
    config.update(
        entities={"node": {"num_partitions": 4}},
        batch_size=1000,
        num_batch_negs=1000,
        num_uniform_negs=1000,
        num_machines=2,
        shared_paths=True,
    )
    for key in ("entity_path", "checkpoint_path"):
        config[key] = str(root / config[key])
    config["edge_paths"] = [str(root / path) for path in config["edge_paths"]]
    (root / "config.json").write_text(json.dumps(config))
    done = subprocess.run(
        [PBG, "import", "config.json", "edges.tsv", "--lhs-col", "0", "--rhs-col", "1"],
        cwd=root,
        env=cli_environment(root / "home"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return root / "config.json"


@slow
def test_ctrl_c_abandons_the_buckets_in_flight_at_once(cluster: DaskProcesses, tmp_path: Path) -> None:
    config = heavy_graph(tmp_path / "heavy")
    env = cli_environment(tmp_path / "home")
    with Client(cluster.address, set_as_default=False) as client:
        busy_since: list[float] = []

        def a_bucket_trains(_pid: int) -> bool:
            """True once a worker has been running a bucket for 5 s (its machine built, training)."""
            if any(client.processing().values()):
                busy_since.append(busy_since[0] if busy_since else time.monotonic())
                return time.monotonic() - busy_since[0] > 5
            return False

        stopped = signal_when(
            ["train", "-p", f"dask_address={cluster.address}", str(config)],
            a_bucket_trains,
            signal.SIGINT,
            env,
            tmp_path,
            timeout=600,
        )
        assert stopped.signalled and stopped.returncode == 130, stopped.output[-3000:]
        # Well within one bucket's training (tens of seconds here): nothing waited for it.
        assert stopped.seconds_to_exit < 15, stopped.output[-3000:]
        # Each worker's one thread is free for the next run at once: no bucket still trains there.
        for worker in sorted(client.scheduler_info(n_workers=-1)["workers"]):
            assert client.submit(os.getpid, workers=[worker], pure=False).result(timeout=10) > 0
        assert client.run(open_machines) == {w: [] for w in client.run(os.getpid)}  # every machine closed
    assert all(proc.poll() is None for proc in cluster.processes)  # and still there
    assert CheckpointStore(json.loads(config.read_text())["checkpoint_path"]).read_version() == 0
