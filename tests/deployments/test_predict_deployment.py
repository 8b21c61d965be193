"""Batch scoring after a promoted retraining, on the local stack: ``pbg-predict/predict``'s trigger.

The trigger ``deployments/prefect.yaml`` declares is read back from the server (an automation owned
by the deployment) and checked: the event ``pbg.retrain.promoted`` about the demo's root, the run's
directory and version taken from the event. It watches ``demo-out/umls/retrain``, which a test does
not write, so the test adds the same automation pointed at its own root and files (its ``match``,
and the config, queries and output of the action's parameters; the event's templates as shipped).
Then a real ``pbg-retrain/retrain`` run on that root is promoted, and the ``pbg-predict/predict``
run it triggers loads exactly the promoted run and version and publishes its output; a second
retraining run with nothing new is skipped and triggers nothing.

Slow (two deployed retraining runs and a triggered prediction, a few minutes): run by
`make test-long` (CI runs it), or with ``PBG_SLOW_TESTS=1``.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from stack import Stack
from test_retrain_deployment import RETRAIN, parameters, planted_days, write_day

PREDICT = "pbg-predict/predict"
DEMO_ROOT = "demo-out/umls/retrain"
QUIET_S = 30  # a skipped run's event, had there been one, would have started a run well within this

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
]


def shipped_automation(stack: Stack) -> tuple[str, dict[str, Any]]:
    """The deployment's id and the automation its trigger in prefect.yaml became."""
    deployment = stack.api("GET", f"/deployments/name/{PREDICT}")
    [automation] = stack.api("GET", f"/automations/related-to/prefect.deployment.{deployment['id']}")
    return deployment["id"], automation


def predict_runs(stack: Stack, deployment_id: str) -> list[dict[str, Any]]:
    """The deployment's flow runs, oldest first."""
    body = {"flow_runs": {"deployment_id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC"}
    return stack.api("POST", "/flow_runs/filter", body)


def wait_for_run(stack: Stack, deployment_id: str, timeout: float = 300) -> dict[str, Any]:
    """The deployment's first flow run, once one exists."""
    deadline = time.monotonic() + timeout
    while not (runs := predict_runs(stack, deployment_id)):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {PREDICT} run within {timeout} s; worker log:\n{stack.worker_log_tail()}")
        time.sleep(2)
    return runs[0]


def test_a_promoted_retraining_triggers_predictions_of_its_run_and_a_skipped_one_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    deployment_id, shipped = shipped_automation(stack)
    assert shipped["trigger"]["expect"] == ["pbg.retrain.promoted"]
    assert shipped["trigger"]["match"] == {"prefect.resource.id": f"pbg.checkpoint-root.{DEMO_ROOT}"}
    [action] = shipped["actions"]
    assert action["type"] == "run-deployment" and action["deployment_id"] == deployment_id
    event_parameters = {key: action["parameters"][key] for key in ("overrides", "version", "force")}
    assert event_parameters == {
        "overrides": ["checkpoint_path={{ event.payload.run_dir }}"],
        "version": "{{ event.payload.version }}",
        "force": True,
    }

    (tmp_path / "incoming").mkdir()
    retrain = parameters(stack, tmp_path)
    retrain["retrain"] |= {"epochs": 2, "min_mrr": None}
    root = retrain["config"]["checkpoint_path"]
    config_url = tmp_path / "predict-config.json"
    config_url.write_text(json.dumps(retrain["config"]))
    (tmp_path / "queries.tsv").write_text("n1\tn2\nn21\tn22\nn45\tn40\n")
    output = tmp_path / "predictions" / "top.tsv"
    ours = {key: value for key, value in shipped.items() if key not in ("id", "created", "updated")}
    ours["name"] = f"{shipped['name']} (test root)"
    ours["trigger"] = shipped["trigger"] | {"match": {"prefect.resource.id": f"pbg.checkpoint-root.{root}"}}
    mine = {"config_url": str(config_url), "queries": str(tmp_path / "queries.tsv"), "output": str(output)}
    ours["actions"] = [action | {"parameters": action["parameters"] | mine | {"rel_col": None, "rhs_col": 1, "k": 5}}]
    stack.api("POST", "/automations/", ours)

    write_day(tmp_path / "incoming" / "day0.tsv", planted_days(random.Random(3))[0])
    first = stack.wait_for_state(stack.run_deployment(retrain, name=RETRAIN), ["COMPLETED"], 600)
    latest = json.loads((tmp_path / "runs" / "latest.json").read_text())
    triggered = wait_for_run(stack, deployment_id)
    done = stack.wait_for_state(triggered["id"], ["COMPLETED"], 600)
    assert done["parameters"]["version"] == latest["version"]  # a number, from the event
    assert done["parameters"]["overrides"] == [f"checkpoint_path={latest['checkpoint_path']}"]
    lines = output.read_text().splitlines()
    assert lines[0].startswith("query\thead\trelation\ttail\trank\tscore") and len(lines) == 1 + 3 * 5
    [table] = [a for a in stack.artifacts([triggered["id"]]) if a["type"] == "table"]
    assert f"version {latest['version']} of `{latest['checkpoint_path']}`" in table["description"]
    assert first["state"]["type"] == "COMPLETED"
    published = output.read_bytes()
    skipped = stack.wait_for_state(stack.run_deployment(retrain, name=RETRAIN), ["COMPLETED"], 600)
    assert json.loads((tmp_path / "runs" / "latest.json").read_text()) == latest  # nothing promoted
    time.sleep(QUIET_S)
    assert [run["id"] for run in predict_runs(stack, deployment_id)] == [triggered["id"]], skipped["state"]
    assert output.read_bytes() == published
