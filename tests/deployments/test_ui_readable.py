"""What a person reads of the shared deployed run in the Prefect UI (issue 34), in headless Chromium.

The pages of ``uninterrupted`` (``shared_runs.py``, the run ``test_local_stack.py`` reads; no
run of its own) beyond its flow run page's tabs: the Runs page with "Hide subflows" on, the run
summary artifact's page (its learning curve image) and an iteration table's page (its MRR
columns and what they measure). One render per page, rendered again only while the server is
still ingesting (:func:`ui_pages.show_page`). Screenshots go to ``$PBG_TEST_OUTPUT/ui-readable``
when that is set, else to pytest's tmp dir.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from run_records import table_keys, wait_for_artifacts
from shared_runs import NEEDED_BUCKETS, NUM_EPOCHS
from stack import Stack
from ui_pages import Page, artifact_url, require_chromium, runs_url, screenshot_dir, show_page

from storage import metric_labels

pytestmark = pytest.mark.integration

SVG_IMAGE = re.compile(r"!\[[^\]]*\]\((data:image/svg\+xml;base64,[A-Za-z0-9+/=]+)\)")
DEFINITION_AFTER = "resumed from an earlier attempt. "  # the iteration table's description, then its MRR's definition


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium executable (skips the module without one, fails it under PBG_REQUIRE_CHROMIUM=1)."""
    return require_chromium()


def run_artifacts(stack: Stack, run: SimpleNamespace) -> list[dict[str, Any]]:
    """The run's progress bar, summary and one table per iteration, as the API returns them."""
    return wait_for_artifacts(stack, run.id, NUM_EPOCHS + 2)


def report(capsys: pytest.CaptureFixture[str], what: str, page: Page) -> None:
    """Print where the page's screenshot is and what the page cost."""
    with capsys.disabled():
        print(f"\nUI {what}: {page.attempts} render(s), {page.seconds:.1f} s; screenshot {page.screenshot}")


def test_the_runs_page_hiding_subflows_lists_the_run_and_no_iteration(
    chromium: str, stack: Stack, uninterrupted: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``<ui>/v2/runs?hide-subflows=true``: the root run by its name, none of the iteration subflows."""
    name = stack.flow_run(uninterrupted.id)["name"]
    assert len(stack.subflow_runs(uninterrupted.id)) == NUM_EPOCHS  # there are subflows to hide
    page = show_page(
        runs_url(stack.api_url, hide_subflows=True),
        [name],
        screenshot_dir(tmp_path, "ui-readable") / "runs-hide-subflows.png",
        chromium=chromium,
        absent=("epoch 1/",),  # any run's first iteration: "epoch 1/5, path 1/1, chunk 1/1"
    )
    report(capsys, "Runs page, subflows hidden", page)


def test_the_summary_page_draws_the_learning_curve_of_the_artifact(
    chromium: str, stack: Stack, uninterrupted: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The summary's learning curve is an ``<img>`` of our SVG as a data URI, and its words are shown."""
    [summary] = [a for a in run_artifacts(stack, uninterrupted) if a["type"] == "markdown"]
    [posted] = SVG_IMAGE.findall(summary["data"])
    page = show_page(
        artifact_url(stack.api_url, summary["id"]),
        ["Learning curve", "best epoch", metric_labels.IN_TRAINING],
        screenshot_dir(tmp_path, "ui-readable") / "summary-artifact.png",
        chromium=chromium,
    )
    report(capsys, "summary artifact page", page)
    shown = [src for _, src in page.images if src.startswith("data:image/svg+xml")]
    assert shown == [posted], f"{len(shown)} SVG image(s) on {page.url}: {[src[:60] for src in shown]}"
    svg = base64.b64decode(posted.removeprefix("data:image/svg+xml;base64,")).decode("utf-8")
    assert svg.startswith('<svg xmlns="http://www.w3.org/2000/svg"') and svg.rstrip().endswith("</svg>"), svg[:200]
    assert f"Learning curve of {uninterrupted.checkpoint.name}" in svg


def test_an_iteration_table_page_names_its_mrr_columns_and_what_they_measure(
    chromium: str, stack: Stack, uninterrupted: SimpleNamespace, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last iteration's table: the in-training MRR columns by their names, and the definition line."""
    key = table_keys(uninterrupted.checkpoint.name, NUM_EPOCHS)[-1]
    [table] = [a for a in run_artifacts(stack, uninterrupted) if a["key"] == key]
    definition = table["description"].partition(DEFINITION_AFTER)[2]
    assert definition.startswith(f"{metric_labels.IN_TRAINING}: the 10% of each bucket held out"), table["description"]
    page = show_page(
        artifact_url(stack.api_url, table["id"]),
        [key, metric_labels.MRR_BEFORE, metric_labels.MRR_AFTER, definition],
        screenshot_dir(tmp_path, "ui-readable") / "iteration-table-artifact.png",
        chromium=chromium,
    )
    report(capsys, f"table artifact page ({NEEDED_BUCKETS // NUM_EPOCHS} buckets)", page)
