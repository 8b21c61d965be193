"""Fault test of issue 3: training on S3 survives throttling, 5xx answers and an outage.

The 2x2-partitioned planted graph is trained for 2 epochs (seed 0, 1 worker) with every
path (entity_path, edge_paths, checkpoint_path) on S3, reached through the fault proxy of
``tests/s3_proxy.py`` in front of moto. Each run must complete, commit version 2, write
one stats row per bucket, and its checkpoint must be bit-identical to a fault-free run of
the same config on local disk: a retried step redoes its work exactly, it never trains a
bucket twice or skips one.

Retry layers, innermost first:

1. botocore, inside one request: 5 attempts in its legacy mode by default, backoff
   ``rand * 2**n`` s (up to ~15 s in all), for 500/502/503/504, throttling codes and
   connection errors. ``storage/fs/`` sets no retry options, so the defaults apply.
2. s3fs, around botocore: re-calls on ``SlowDown`` (5 rounds), not on 500, not on a HEAD's
   bodiless 503, not on connection errors.
3. storage's own background upload of bucket progress (``storage/staged_progress.py``)
   retries a failed upload ("background upload of bucket progress failed ...; retrying").
4. The Prefect task retries (``tasks/_policies.py``: 3 retries after 1, 4 and 10 s) on
   ``TransientStorageError``.

With botocore's defaults nearly every fault is absorbed in layer 1 and the task layer is
never exercised (a 3 s outage too: the expected backoff of 4 retries is ~7.5 s). These
tests set ``AWS_MAX_ATTEMPTS=2`` (one botocore retry, backoff under 1 s) so that faults
reach the task layer. The injected faults are a function of the seed and each request's
(method, key, n-th time), so a run sees the same faults every time.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import boto3
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId
from s3_proxy import S3Proxy

from bench.lib.s3_server import S3Server
from flows.train import pbg
from pbg_core.config import parse_config

NUM_EPOCHS = 2
ERROR_SHARE = 0.2
OUTAGE_S = 3.0
RELATIONS = [{"name": "linked", "lhs": "node", "rhs": "node", "operator": "diagonal"}]


def run_config(config_for: Any, graph_2x2: Any, **paths: Any) -> dict[str, Any]:
    """The run of every case: 2x2 partitions, 3 epochs, seed 0, 1 worker (``config_for``'s)."""
    return config_for(graph_2x2, paths.pop("checkpoint_path"), num_epochs=NUM_EPOCHS, relations=RELATIONS, **paths)


@pytest.fixture(scope="module")
def reference(graph_2x2: Any, config_for: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fault-free run on local disk: its checkpoint directory."""
    checkpoint = tmp_path_factory.mktemp("reference") / "ckpt"
    result = pbg(config=parse_config(run_config(config_for, graph_2x2, checkpoint_path=str(checkpoint))))
    assert result["version"] == NUM_EPOCHS
    return checkpoint


def upload_tree(server: S3Server, local: Path, bucket: str, prefix: str) -> None:
    """Copy a local directory to ``s3://bucket/prefix/`` straight to moto (not through the proxy)."""
    client = boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1")
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")


def download_checkpoint(server: S3Server, bucket: str, prefix: str, local: Path) -> Path:
    """The top level of ``s3://bucket/prefix/`` (version pointer and .h5 files) in ``local``."""
    client = boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1")
    local.mkdir(parents=True)
    listing = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/", Delimiter="/")
    for item in listing.get("Contents", []):
        client.download_file(bucket, item["Key"], str(local / item["Key"].rpartition("/")[2]))
    return local


def task_runs_of(flow_run_id: UUID) -> list[Any]:
    """Every task run of the flow run and of its subflow runs (the iterations)."""
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]))
        )
        ids = [flow_run_id, *(child.id for child in children)]
        return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))


def retried_tasks(flow_run_id: UUID) -> Counter[str]:
    """Task run name -> retries (run_count - 1) summed over the runs of that name that were retried."""
    retries: Counter[str] = Counter()
    for run in task_runs_of(flow_run_id):
        if run.run_count > 1:
            retries[run.name] += run.run_count - 1
    return retries


def train_on_s3(
    proxy: S3Proxy, server: S3Server, bucket: str, graph_2x2: Any, config_for: Any, tmp_path: Path
) -> SimpleNamespace:
    """Upload the data, train with every path on ``s3://bucket`` (through the proxy), fetch the result."""
    upload_tree(server, Path(graph_2x2.entity_path), bucket, "data")
    train = Path(graph_2x2.train_path).relative_to(graph_2x2.entity_path).as_posix()
    config = run_config(
        config_for,
        graph_2x2,
        entity_path=f"s3://{bucket}/data",
        edge_paths=[f"s3://{bucket}/data/{train}"],
        checkpoint_path=f"s3://{bucket}/ckpt",
    )
    started = time.monotonic()
    state = pbg(config=parse_config(config), return_state=True)
    seconds = time.monotonic() - started
    result = state.result()
    checkpoint = download_checkpoint(server, bucket, "ckpt", tmp_path / "downloaded")
    return SimpleNamespace(
        result=result,
        checkpoint=checkpoint,
        retries=retried_tasks(state.state_details.flow_run_id),
        counters=proxy.counters(),
        seconds=seconds,
    )


def bucket_rows(checkpoint: Path) -> list[tuple[int, int, int, int]]:
    """(index, epoch, lhs, rhs) of every per-bucket row of training_stats.json, in file order."""
    rows = [json.loads(line) for line in (checkpoint / "training_stats.json").read_text().splitlines()]
    return [
        (row["index"], row["epoch_idx"], row["lhs_partition"], row["rhs_partition"])
        for row in rows
        if "eval_stats_chunk_avg" not in row
    ]


def assert_same_checkpoint(got: Path, expected: Path, h5_datasets: Any) -> None:
    """Same version pointer and stats rows (none duplicated), same .h5 files, datasets bit-identical."""
    assert (got / "checkpoint_version.txt").read_text().strip() == str(NUM_EPOCHS)
    assert bucket_rows(got) == bucket_rows(expected)
    assert [row[0] for row in bucket_rows(got)] == list(range(4 * NUM_EPOCHS))
    names = sorted(p.name for p in expected.glob("*.h5"))
    assert names == sorted(p.name for p in got.glob("*.h5"))
    assert f"model.v{NUM_EPOCHS}.h5" in names
    for name in names:
        left, right = h5_datasets(got / name), h5_datasets(expected / name)
        assert left.keys() == right.keys(), name
        for key in left:
            assert left[key].tobytes() == right[key].tobytes(), f"{name}:{key} differs from the fault-free run"


@pytest.fixture
def one_botocore_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    """2 attempts per request in botocore's legacy mode (read when s3fs makes a client)."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("AWS_RETRY_MODE", "legacy")


@pytest.fixture
def train_through_proxy(
    one_botocore_retry: None,
    s3_proxy: S3Proxy,
    s3_server: S3Server,
    s3_bucket: str,
    graph_2x2: Any,
    config_for: Any,
    tmp_path: Path,
) -> Callable[[], SimpleNamespace]:
    """:func:`train_on_s3` through the fault-injecting proxy, with one botocore retry per request."""
    return lambda: train_on_s3(s3_proxy, s3_server, s3_bucket, graph_2x2, config_for, tmp_path)


def report(case: str, run: SimpleNamespace) -> str:
    """One line of figures for the test log (``pytest -s``)."""
    return (
        f"\n{case}: {run.seconds:.1f} s, proxy {dict(run.counters)}, "
        f"task retries {sum(run.retries.values())} {dict(run.retries)}"
    )


@pytest.mark.slow
def test_run_completes_with_a_fifth_of_requests_failing(
    s3_proxy: S3Proxy, train_through_proxy: Callable[[], SimpleNamespace], reference: Path, h5_datasets: Any
) -> None:
    """Throttling and 5xx answers on 20 % of all requests, from start to end of the run.

    Proves: a transient S3 error at any storage step (lease, plan, session open, swaps,
    edge loads, bucket progress, checkpoint write, pointer switch, snapshot, cleanup) is
    translated to ``TransientStorageError`` and retried -- by botocore/s3fs within the request
    or by the Prefect task -- and a retried step redoes its work exactly: the committed
    checkpoint equals the fault-free one bit for bit.
    """
    s3_proxy.error_share(ERROR_SHARE, status=503, code="SlowDown", mix=[(500, "InternalError")], seed=0)
    run = train_through_proxy()
    print(report("error share", run))
    assert run.result["version"] == NUM_EPOCHS
    assert_same_checkpoint(run.checkpoint, reference, h5_datasets)
    assert run.counters.get("503 SlowDown", 0) > 0 and run.counters.get("500 InternalError", 0) > 0
    assert sum(run.retries.values()) > 0, "no Prefect task retry happened: every fault was absorbed below"


@pytest.mark.slow
def test_run_completes_across_a_3_s_outage(
    s3_proxy: S3Proxy, train_through_proxy: Callable[[], SimpleNamespace], reference: Path, h5_datasets: Any
) -> None:
    """The S3 endpoint resets every connection for 3 s right after the first version is committed.

    Proves: an outage longer than the request-level retries (one botocore retry, < 1 s)
    fails the running task with a transient error (reset / cut keep-alive connections), the
    Prefect task retry after 1 s or 4 s redoes it once the server is back, and the run
    completes with the same checkpoint as without the outage. (Refused connections would not
    do: on a loopback endpoint like this proxy's they mean "no server", which is not retried;
    see tests/storage/test_fail_fast.py.)
    """
    s3_proxy.when(
        lambda method, path, status: (
            method == "PUT" and path.endswith("/ckpt/checkpoint_version.txt") and status == 200
        ),
        lambda: s3_proxy.down(OUTAGE_S, mode="reset"),
    )
    run = train_through_proxy()
    print(report("outage", run))
    assert run.result["version"] == NUM_EPOCHS
    assert_same_checkpoint(run.checkpoint, reference, h5_datasets)
    assert run.counters.get("outage") == 1
    assert sum(run.retries.values()) > 0, "no Prefect task retry happened: the outage was absorbed below"
