"""bench.lib.in_order: the ``pbg`` flow's iteration subflows called in order, bench.pipeline's baseline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

from bench.lib.in_order import SUBFLOW_HEARTBEATS_VARIABLE, InOrder, use_in_order

REPO = Path(__file__).resolve().parents[3]


def test_each_call_starts_after_the_previous_one_returned_and_was_handed_out() -> None:
    events: list[str] = []

    def call(index: int) -> int:
        events.append(f"start {index}")
        events.append(f"end {index}")
        return index * 10

    calls = [lambda i=i: call(i) for i in range(3)]
    for result in InOrder().run_in_order(calls, ["a", "b", "c"], overlap_after=lambda _: True):
        events.append(f"got {result}")
    assert events == ["start 0", "end 0", "got 0", "start 1", "end 1", "got 10", "start 2", "end 2", "got 20"]


def test_with_subflow_heartbeats_off_each_call_runs_without_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import get_current_settings

    monkeypatch.setenv(SUBFLOW_HEARTBEATS_VARIABLE, "off")
    seen = list(InOrder().run_in_order([lambda: get_current_settings().flows.heartbeat_frequency], ["a"], bool))
    assert seen == [None]
    monkeypatch.setenv(SUBFLOW_HEARTBEATS_VARIABLE, "on")
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: 30}):
        seen = list(InOrder().run_in_order([lambda: get_current_settings().flows.heartbeat_frequency], ["a"], bool))
    assert seen == [30]


def test_a_module_without_the_pipeline_is_refused_by_name() -> None:
    with pytest.raises(RuntimeError, match=r"flows\.train has no SubflowPipeline"):
        use_in_order(ModuleType("flows.train"))


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_command_line_variant_replaces_the_pipeline_only_once_flows_train_is_imported() -> None:
    # Prefect must not be imported before the CLI sets its defaults (flows/cli/main.py).
    code = (
        "import sys; from bench.lib import in_order; print('prefect' in sys.modules); "
        "sys.meta_path.insert(0, in_order._InOrderOnImport()); import flows.train; "
        "print(flows.train.SubflowPipeline.__name__, flows.train.pbg.name)"
    )
    assert _python(code).splitlines() == ["False", "InOrder pbg"]


def test_the_deployment_entrypoint_is_the_pbg_flow_with_its_subflows_in_order() -> None:
    code = (
        "import bench.lib.in_order_deployment as d, flows.train; "
        "print(flows.train.SubflowPipeline.__name__, d.pbg is flows.train.pbg, d.pbg.name)"
    )
    assert _python(code) == "InOrder True pbg"
