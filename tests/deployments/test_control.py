"""Control of deployment runs on the local stack: cancel, bad parameters, bad storage, `pbg serve`, the
retraining deployment's schedule.

Shares the session's stack (``conftest.py``) with the end-to-end tests. Every run trains the
planted graph of ``tests/conftest.py`` in a 2x2 bucket grid.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from stack import PREFECT, REPO_ROOT, Stack, process_tree, running, version_of, write_json

from flows.train import RETRAIN_MOVED
from storage.retraining.options import RetrainOptions

pytestmark = pytest.mark.integration

SECRET = "pbg-test-secret-Zq81vT"  # must never show up in a state message or a log line


def hogwild_children(stack: Stack) -> set[int]:
    """Live multiprocessing children (HOGWILD workers, fork server) below the worker."""
    found = set()
    for pid in process_tree(stack.worker_pid()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "multiprocessing" in cmdline and "resource_tracker" not in cmdline and running(pid):
            found.add(pid)
    return found


def state_message(stack: Stack, flow_run_id: str) -> str:
    return (stack.flow_run(flow_run_id)["state"] or {}).get("message") or ""


def all_log_text(stack: Stack, flow_run_id: str) -> str:
    return "\n".join(log["message"] for log in stack.logs(stack.run_and_subflow_ids(flow_run_id)))


@pytest.mark.slow
def test_cancel_stops_the_hogwild_workers_and_keeps_the_committed_checkpoint(
    stack: Stack, graph_2x2: Any, config_for: Any, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "cancelled"
    config = config_for(graph_2x2, checkpoint, num_epochs=200, workers=2, seed=0)
    run_id = stack.run_deployment({"config_url": str(write_json(tmp_path / "config.json", config))})
    deadline = time.monotonic() + 300
    while not (version_of(checkpoint) >= 1 and hogwild_children(stack)):
        assert time.monotonic() < deadline, f"no commit with live workers; worker log:\n{stack.worker_log_tail()}"
        assert stack.state_of(run_id) in {"SCHEDULED", "PENDING", "RUNNING"}, stack.worker_log_tail()
        time.sleep(0.5)
    children = hogwild_children(stack)

    cancelled_at = time.monotonic()
    stack.prefect("flow-run", "cancel", run_id)
    stack.wait_for_state(run_id, {"CANCELLED"}, timeout=120)
    while any(running(pid) for pid in children):
        assert time.monotonic() - cancelled_at < 60, f"HOGWILD workers {sorted(children)} outlived the cancel"
        time.sleep(0.2)
    print(f"\ncancel -> CANCELLED and workers gone in {time.monotonic() - cancelled_at:.1f} s")

    committed = version_of(checkpoint)
    assert committed >= 1
    assert (checkpoint / f"model.v{committed}.h5").exists()
    for part in (0, 1):
        assert (checkpoint / f"embeddings_node_{part}.v{committed}.h5").exists()
    # The checkpoint is usable: the next run (fewer epochs than the cancelled one) resumes from it.
    resume = {**config, "num_epochs": committed + 1}
    again = stack.run_deployment({"config_url": str(write_json(tmp_path / "resume.json", resume))})
    stack.wait_for_state(again, {"COMPLETED"}, timeout=300)
    assert version_of(checkpoint) == committed + 1


def test_invalid_parameters_are_rejected_before_a_run_exists(stack: Stack) -> None:
    cases = {
        "pause_every": ("pbg/train", ["--param", "pause_every=-1"]),
        "retrain": ("pbg-retrain/retrain", ["--param", 'retrain={"keep_last": 0}']),
        "config_url": ("pbg/train", ["--param", "config_url=[1, 2]"]),
    }
    for field, (deployment, args) in cases.items():
        done = subprocess.run(
            [str(PREFECT), "deployment", "run", deployment, *args],
            env=stack.env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        output = done.stdout + done.stderr
        assert done.returncode != 0, f"{args} was accepted:\n{output}"
        assert field in output, f"the rejection of {args} does not name {field}:\n{output}"


@pytest.mark.slow
def test_a_config_url_with_a_bad_field_fails_the_run_naming_it(
    stack: Stack, graph_2x2: Any, config_for: Any, tmp_path: Path
) -> None:
    config = {**config_for(graph_2x2, tmp_path / "never"), "loss_fn": "softmaxx"}
    run_id = stack.run_deployment({"config_url": str(write_json(tmp_path / "bad.json", config))})
    stack.wait_for_state(run_id, {"FAILED"}, timeout=180)
    text = state_message(stack, run_id) + all_log_text(stack, run_id)
    assert "loss_fn" in text and "softmaxx" in text
    assert not (tmp_path / "never").exists()  # no work done


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_an_unreachable_s3_endpoint_fails_fast_naming_the_url_never_the_secret(
    stack: Stack, graph_2x2: Any, config_for: Any, tmp_path: Path
) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    config = config_for(graph_2x2, "s3://pbg-unreachable/model")
    config.update(
        entity_path="s3://pbg-unreachable/data",
        edge_paths=["s3://pbg-unreachable/data/train_partitioned"],
        storage_options={"endpoint_url": endpoint, "key": "AKIAPBGTEST", "secret": SECRET},
    )
    started = time.monotonic()
    run_id = stack.run_deployment({"config_url": str(write_json(tmp_path / "s3.json", config))})
    stack.wait_for_state(run_id, {"FAILED"}, timeout=240)
    elapsed = time.monotonic() - started
    message = state_message(stack, run_id)
    logs = all_log_text(stack, run_id)
    print(f"\nunreachable endpoint: FAILED after {elapsed:.1f} s: {message[:300]}")
    assert "s3://pbg-unreachable" in message + logs
    assert SECRET not in message and SECRET not in logs
    params = json.dumps(stack.flow_run(run_id)["parameters"])
    assert SECRET not in params  # the secret travelled in the file, not the parameters


@pytest.mark.slow
def test_pbg_serve_runs_deployment_runs_without_a_worker(
    stack: Stack, graph_2x2: Any, config_for: Any, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "served"
    config_url = write_json(tmp_path / "served.json", config_for(graph_2x2, checkpoint, num_epochs=1))
    log = (tmp_path / "serve.log").open("w")
    serve = subprocess.Popen(
        [str(REPO_ROOT / ".venv" / "bin" / "pbg"), "serve", "--name", "served", "--config-url", str(config_url)],
        env={**stack.env, "PREFECT_RUNNER_POLL_FREQUENCY": "2"},
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                stack.api("GET", "/deployments/name/pbg/served")
                break
            except httpx.HTTPStatusError:
                assert serve.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "pbg serve never registered pbg/served"
                time.sleep(1)
        run_id = stack.run_deployment({}, name="pbg/served")  # the served default config_url
        stack.wait_for_state(run_id, {"COMPLETED"}, timeout=300)
        assert version_of(checkpoint) == 1
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        try:
            serve.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
        log.close()


def test_a_pbg_train_run_given_retrain_fails_in_one_line_naming_pbg_retrain(stack: Stack) -> None:
    """Through the API (the UI's way): the server takes the unknown parameter; the flow refuses it at once."""
    deployment = stack.api("GET", "/deployments/name/pbg/train")
    body = {"parameters": {"config_url": "examples/umls/config.json", "retrain": {"keep_last": 2}}}
    run = stack.api("POST", f"/deployments/{deployment['id']}/create_flow_run", body)
    message = stack.wait_for_state(run["id"], ["FAILED"], timeout=300)["state"]["message"]
    assert RETRAIN_MOVED in message and len(message.splitlines()) == 1, message


def test_the_retrain_deployment_has_the_retraining_schedule_switched_off(stack: Stack) -> None:
    assert stack.api("GET", "/deployments/name/pbg/train")["schedules"] == []  # the schedule moved
    deployment = stack.api("GET", "/deployments/name/pbg-retrain/retrain")
    assert deployment["entrypoint"] == "flows/retrain.py:pbg_retrain"
    assert deployment["concurrency_limit"] == 1 or (deployment.get("global_concurrency_limit") or {}).get("limit") == 1
    [schedule] = deployment["schedules"]
    assert schedule["active"] is False
    assert schedule["schedule"]["cron"] == "0 3 * * *"
    retrain = schedule["parameters"]["retrain"]
    assert {key: retrain[key] for key in ("keep_last", "epochs", "on_no_new_data", "max_mrr_drop")} == {
        "keep_last": 3,
        "epochs": 3,
        "on_no_new_data": "skip",
        "max_mrr_drop": 0.05,
    }
    assert retrain["incoming"]["inputs"] == "demo-out/umls/incoming"
    RetrainOptions.model_validate(retrain)  # what the server would pass the flow is a valid form
    assert schedule["parameters"]["config_url"] == "examples/umls/config.json"
