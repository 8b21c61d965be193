"""The Prefect UI shows a flow run, its subflow runs and its artifacts (headless Chromium).

On the server of the deployment tests' local stack (``conftest.py``; a server of its own cost
this file 35 s or more of start-up): runs a tiny flow with two subflows and two artifacts in a
subprocess against it, then renders the run's page with :mod:`ui_check`. Screenshots go to
``$PBG_TEST_OUTPUT/ui`` when that is set (for CI to keep), else to pytest's tmp dir; their
paths are printed. Skipped only when no Chromium is installed (``.ci/install-chromium.sh``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from stack import Stack, clean_env
from ui_check import FLOW_RUN_TABS, check_flow_run_page, flow_run_url, visible_text
from ui_pages import artifact_key_url, artifact_url, images, require_chromium, runs_url, show_page, task_run_url

FLOW_TIMEOUT_S = 180

FLOW_SOURCE = """
import json
from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.runtime import flow_run

@flow(flow_run_name="ui-child-{part}")
def child(part: int) -> str:
    return flow_run.get_id()

@flow(flow_run_name="ui-parent-run")
def parent() -> dict:
    children = [child(1), child(2)]
    summary = create_markdown_artifact(
        key="ui-summary", markdown="# Summary\\nloss 0.5", description="UI check summary")
    metrics = create_table_artifact(
        key="ui-metrics", table=[{"bucket": "(0, 0)", "loss": 0.5}], description="UI check metrics")
    return {"parent": flow_run.get_id(), "children": children,
            "artifacts": {"ui-summary": str(summary), "ui-metrics": str(metrics)}}

if __name__ == "__main__":
    print(json.dumps(parent()))
"""


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium executable; skips the module when there is none (fails under PBG_REQUIRE_CHROMIUM=1, as in CI)."""
    return require_chromium()


@pytest.fixture(scope="module")
def ui_server(chromium: str, stack: Stack) -> str:
    """The base URL of the local stack's server (its UI included)."""
    return stack.api_url.removesuffix("/api")


@pytest.fixture(scope="module")
def finished_run(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Ids of the tiny flow's run, its two subflow runs and its two artifacts."""
    script = tmp_path_factory.mktemp("ui-flow") / "ui_flow.py"
    script.write_text(FLOW_SOURCE)
    env = {**clean_env(script.parent / "prefect-home"), "PREFECT_API_URL": stack.api_url}
    env["PREFECT_LOGGING_LEVEL"] = "WARNING"
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=FLOW_TIMEOUT_S
    )
    assert done.returncode == 0, f"flow failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def screenshot_dir(tmp_path: Path) -> Path:
    """``$PBG_TEST_OUTPUT/ui`` when set (kept by CI), else the test's tmp dir."""
    root = os.environ.get("PBG_TEST_OUTPUT")
    return Path(root) / "ui" if root else tmp_path / "ui"


def test_flow_run_page_shows_run_subflows_and_artifacts(
    chromium: str,
    ui_server: str,
    finished_run: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = ui_server
    shots = screenshot_dir(tmp_path)
    results = check_flow_run_page(
        url,
        finished_run["parent"],
        {
            "SubflowRuns": ["ui-parent-run", "ui-child-1", "ui-child-2"],
            "Artifacts": ["ui-summary", "UI check summary", "ui-metrics", "UI check metrics"],
        },
        shots,
        chromium=chromium,
    )
    with capsys.disabled():
        for result in results.values():
            print(f"\nUI screenshot ({result.tab}, {result.attempts} render(s)): {result.screenshot}")
    # The subflow names link to their own runs, the artifact cards to the artifacts created.
    child_1, child_2 = finished_run["children"]
    assert results["SubflowRuns"].links["ui-child-1"] == f"/v2/runs/flow-run/{child_1}"
    assert results["SubflowRuns"].links["ui-child-2"] == f"/v2/runs/flow-run/{child_2}"
    for key, artifact_id in finished_run["artifacts"].items():
        assert results["Artifacts"].links[key] == f"/v2/artifacts/artifact/{artifact_id}"
    for result in results.values():
        assert result.screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", result.screenshot


def test_missing_text_fails_with_what_is_missing_and_page_excerpt(
    chromium: str, ui_server: str, finished_run: dict, tmp_path: Path
) -> None:
    url = ui_server
    with pytest.raises(AssertionError) as failure:
        check_flow_run_page(
            url,
            finished_run["parent"],
            {"Artifacts": ["ui-metrics", "no-such-artifact"]},
            tmp_path,
            attempts=1,
            chromium=chromium,
        )
    message = str(failure.value)
    assert "tab Artifacts: missing ['no-such-artifact'] (found ['ui-metrics'])" in message
    assert "page text: " in message and "UI check metrics" in message
    assert str(tmp_path / "flow-run-Artifacts.png") in message


def test_visible_text_skips_scripts_and_maps_text_to_innermost_link() -> None:
    dom = (
        "<html><head><title>Flow Run: r</title><script>var hidden = 'ui-child-9';</script></head>"
        "<body><a href='/card'><h3>ui-metrics</h3><p>UI   check\nmetrics</p></a>"
        "<a href='/outer'>child / <a href='/inner'>ui-child-1</a></a>"
        "<svg><text>canvas</text></svg></body></html>"
    )
    text, links = visible_text(dom)
    assert text == "Flow Run: r ui-metrics UI check metrics child / ui-child-1"
    assert ("ui-metrics UI check metrics", "/card") in links
    assert ("ui-child-1", "/inner") in links


def test_flow_run_url_names_the_tab_accepts_api_urls_and_rejects_unknown_tabs() -> None:
    expected = "http://127.0.0.1:4200/v2/runs/flow-run/abc?tab=SubflowRuns"
    assert flow_run_url("http://127.0.0.1:4200/", "abc", "SubflowRuns") == expected
    assert flow_run_url("http://127.0.0.1:4200/api", "abc", "SubflowRuns") == expected
    with pytest.raises(ValueError, match="unknown flow run tab 'Subflows'; allowed: Logs, TaskRuns"):
        flow_run_url("http://127.0.0.1:4200", "abc", "Subflows")
    assert "SubflowRuns" in FLOW_RUN_TABS and "Artifacts" in FLOW_RUN_TABS


def test_the_runs_page_lists_subflows_unless_hidden_and_a_shown_text_fails_the_page(
    chromium: str, ui_server: str, finished_run: dict, tmp_path: Path
) -> None:
    """Without ``hide-subflows`` the Runs page lists the tiny run's subflows: what test_ui_readable.py's
    check of the hidden list would see if the switch did nothing, and what ``absent`` reports."""
    with pytest.raises(AssertionError) as failure:
        show_page(
            runs_url(ui_server, hide_subflows=False),
            ["ui-parent-run"],
            screenshot_dir(tmp_path) / "runs.png",
            chromium=chromium,
            absent=("ui-child-1", "no-such-run"),
        )
    message = str(failure.value)
    assert "missing [], showing ['ui-child-1']" in message and "/v2/runs?hide-subflows=false" in message
    assert "page text: " in message and "ui-parent-run" in message


def test_page_urls_follow_the_v2_routes_and_images_are_read_from_the_dom() -> None:
    base = "http://127.0.0.1:4200/api"
    assert runs_url(base, hide_subflows=True) == "http://127.0.0.1:4200/v2/runs?hide-subflows=true&limit=100"
    assert artifact_url(base, "a1") == "http://127.0.0.1:4200/v2/artifacts/artifact/a1?tab=Artifact"
    assert artifact_key_url(base, "pbg-retrain-x") == "http://127.0.0.1:4200/v2/artifacts/key/pbg-retrain-x"
    assert task_run_url(base, "t1", "Details") == "http://127.0.0.1:4200/v2/runs/task-run/t1?tab=Details"
    with pytest.raises(ValueError, match="unknown task run tab 'TaskRuns'"):
        task_run_url(base, "t1", "TaskRuns")
    dom = '<p><img alt="curve" src="data:image/svg+xml;base64,PHN2Zy8+"><img src="/logo.png"></p>'
    assert images(dom) == [("curve", "data:image/svg+xml;base64,PHN2Zy8+"), ("", "/logo.png")]
