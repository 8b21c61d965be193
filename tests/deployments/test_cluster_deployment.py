"""Distributed training on real processes: ``dask scheduler`` and two ``dask worker`` started from
their command lines on 127.0.0.1, every path on the moto S3 server, credentials in the workers'
environment. ``pbg train`` (a subprocess) and the deployment ``pbg/train`` of the local stack
both train the 4x4 planted graph on that cluster to Completed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from dask_processes import DaskProcesses
from run_records import task_run_names
from stack import Stack, clean_env, write_json

from bench.lib.s3_server import S3Server
from storage.checkpoints import CheckpointStore
from storage.stats_log import StatsLog

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PBG = str(Path(sys.executable).with_name("pbg"))
FIT = {"DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
NUM_EPOCHS = 2


@pytest.fixture(scope="module")
def cluster(s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskProcesses]:
    """A scheduler and two workers with the S3 server's credentials in their environment."""
    processes = DaskProcesses(tmp_path_factory.mktemp("dask"))
    processes.start_scheduler()
    processes.start_worker({**FIT, **s3_server.env})
    processes.start_worker({**FIT, **s3_server.env})
    yield processes
    processes.stop()


def upload(server: S3Server, local: Path, bucket: str, prefix: str) -> None:
    client = boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1")
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")


@pytest.fixture
def s3_config(s3_server: S3Server, s3_bucket: str, graph_4x4: Any, config_for: Any, cluster: DaskProcesses) -> dict:
    """The 4x4 graph on S3, trained on the cluster: 2 machines, 1 HOGWILD worker each, seeded."""
    upload(s3_server, Path(graph_4x4.entity_path), s3_bucket, "data")
    train = Path(graph_4x4.train_path).relative_to(graph_4x4.entity_path).as_posix()
    return config_for(
        graph_4x4,
        f"s3://{s3_bucket}/ckpt",
        entity_path=f"s3://{s3_bucket}/data",
        edge_paths=[f"s3://{s3_bucket}/data/{train}"],
        num_epochs=NUM_EPOCHS,
        num_machines=2,
        dask_address=cluster.address,
    )


def trained_rows(checkpoint_url: str) -> list[dict[str, Any]]:
    rows = StatsLog(checkpoint_url).read()
    return [row for row in rows if "eval_stats_chunk_avg" not in row]


def test_pbg_train_on_command_line_workers_with_data_on_s3(
    s3_config: dict, s3_server: S3Server, tmp_path: Path
) -> None:
    config_file = write_json(tmp_path / "config.json", s3_config)
    env = {**clean_env(tmp_path / "prefect-home"), **s3_server.env}
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "180"
    done = subprocess.run([PBG, "train", str(config_file)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert CheckpointStore(s3_config["checkpoint_path"]).read_version() == NUM_EPOCHS
    rows = trained_rows(s3_config["checkpoint_path"])
    assert sorted(r["index"] for r in rows) == list(range(16 * NUM_EPOCHS))
    assert len({r["machine"] for r in rows}) == 2


def test_the_deployment_trains_on_the_cluster_and_names_each_bucket_s_worker(
    stack: Stack, s3_config: dict, s3_server: S3Server, tmp_path: Path
) -> None:
    # The stack's worker may have started before the S3 server: the credentials go in the config file.
    options = {"endpoint_url": s3_server.endpoint_url, "key": "testing", "secret": "testing", "region": "us-east-1"}
    config_url = write_json(tmp_path / "config.json", {**s3_config, "dask_address": None, "storage_options": options})
    flow_run_id = stack.run_deployment({"config_url": str(config_url), "dask_address": s3_config["dask_address"]})
    stack.wait_for_state(flow_run_id, {"COMPLETED"}, 600)
    assert CheckpointStore(s3_config["checkpoint_path"]).read_version() == NUM_EPOCHS
    names = task_run_names(stack, flow_run_id, at_least=16 * NUM_EPOCHS)
    on_workers = [name for name in names if name.startswith("train bucket (")]
    assert len(on_workers) == 16 * NUM_EPOCHS, sorted(on_workers)
    assert all(" on tcp://127.0.0.1:" in name for name in on_workers)
    assert json.dumps(sorted({name.rsplit(" on ", 1)[1] for name in on_workers})).count("tcp://") == 2
