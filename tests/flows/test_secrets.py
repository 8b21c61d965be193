"""A planted credential never reaches any artifact of a flow run: files, logs, the API's records.

The run uses local paths, where fsspec ignores the credentials, so the whole flow runs and
every sink a run writes to can be grepped: the checkpoint directory (config.json, HDF5
attributes, stats), captured logs and output, the flow run's recorded parameters, its task
runs, logs and artifacts in Prefect's API, and Prefect's own parameter encoder.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from prefect import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId

from flows.evaluate import pbg_eval
from flows.train import pbg
from pbg_core.config import parse_config

KEY = "AKIAPLANTEDFLOWKEY"
SECRET = "planted-flow-s3cr3t-9c1e"
TOKEN = "planted-flow-t0ken-55aa"
PLANTED = (KEY, SECRET, TOKEN)


def leaks(text: str) -> list[str]:
    return [planted for planted in PLANTED if planted in text]


def recorded(flow_run_id: Any) -> str:
    """Everything Prefect's API holds about a flow run, its subflows and tasks, as JSON text."""
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
        runs = [run, *client.read_flow_runs()]  # subflows (iterations) too
        ids = [r.id for r in runs]
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids)))
        artifacts = client.read_artifacts()
    parts = [r.model_dump_json() for r in [*runs, *task_runs, *logs, *artifacts]]
    assert any(log.message for log in logs)  # the run did log through the API
    # The recorded parameter is the config, masked (not dropped as unserializable).
    assert run.parameters["config"]["storage_options"]["secret"] == "**********"
    return "\n".join(parts)


def test_no_sink_of_a_flow_run_holds_the_secret(
    graph: Any, config_for: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    options = {"key": KEY, "secret": SECRET, "client_kwargs": {"aws_session_token": TOKEN}}
    raw = config_for(graph, tmp_path / "ckpt", num_epochs=1, storage_options=options)
    config = parse_config(raw)
    assert config.storage_options_for_fs()["secret"] == SECRET  # it is really there
    with caplog.at_level(logging.DEBUG):
        state = pbg(config=config, return_state=True)
        metrics = pbg_eval(config=config)
    assert state.is_completed() and metrics["count"] > 0
    files = {path: path.read_bytes() for path in (tmp_path / "ckpt").rglob("*") if path.is_file()}
    assert {"config.json", "model.v1.h5", "training_stats.json"} <= {p.name for p in files}
    for path, content in files.items():
        assert not leaks(content.decode("latin-1")), path
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert saved["storage_options"] == {
        **saved["storage_options"],
        "key": "**********",
        "secret": "**********",
        "client_kwargs": {"aws_session_token": "**********"},
    }
    assert not leaks(caplog.text) and not leaks(capsys.readouterr().out)
    api_text = recorded(state.state_details.flow_run_id)
    assert not leaks(api_text)
    encoded = json.dumps(pbg.serialize_parameters({"config": config}))  # what the engine records
    assert not leaks(encoded) and "**********" in encoded
    assert not leaks(json.dumps(config.model_dump(mode="json")))
