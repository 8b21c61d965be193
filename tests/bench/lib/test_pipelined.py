"""bench.lib.pipelined: the ``pbg`` flow's iteration subflows pipelined, bench.pipeline's alternative."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from bench.lib.pipelined import use_pipelined

REPO = Path(__file__).resolve().parents[3]


def test_a_module_without_what_it_replaces_is_refused_by_name() -> None:
    module = ModuleType("flows.train")
    module._run_in_order = lambda: None  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match=r"flows\.train has no _iteration_steps to replace"):
        use_pipelined(module)


def test_the_iteration_steps_run_through_the_pipeline_body_and_the_loop_is_replaced() -> None:
    module = ModuleType("flows.train")
    module._run_in_order = lambda *args: "in order"  # type: ignore[attr-defined]
    module._iteration_steps = lambda a, b: a + b  # type: ignore[attr-defined]
    use_pipelined(module)
    # Outside a pipeline, run_body calls the steps right here.
    assert module._iteration_steps(2, 3) == 5  # type: ignore[attr-defined]
    assert module._run_in_order.func.__name__ == "run_pipelined"  # type: ignore[attr-defined]


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_command_line_variant_replaces_the_loop_only_once_flows_train_is_imported() -> None:
    # Prefect must not be imported before the CLI sets its defaults (flows/cli/main.py).
    code = (
        "import sys; from bench.lib import pipelined; print('prefect' in sys.modules); "
        "sys.meta_path.insert(0, pipelined._PipelinedOnImport()); import flows.train; "
        "print(flows.train._run_in_order.func.__name__, flows.train.pbg.name)"
    )
    assert _python(code).splitlines() == ["False", "run_pipelined pbg"]


def test_the_deployment_entrypoint_is_the_pbg_flow_with_its_subflows_pipelined() -> None:
    code = (
        "import bench.lib.pipelined_deployment as d, flows.train; "
        "print(flows.train._run_in_order.func.__name__, d.pbg is flows.train.pbg, d.pbg.name)"
    )
    assert _python(code) == "run_pipelined True pbg"
