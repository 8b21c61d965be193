"""Pages of the Prefect 3.9 V2 UI other than a flow run's tabs, rendered in headless Chromium (issue 34).

:mod:`ui_check` opens a flow run's tabs; this module opens the other pages a person reads a run
by, with the same :func:`ui_check.render` (``chromium --headless=new --dump-dom``, no Python
dependency). Routes and search parameters, read from the V2 UI bundle in the wheel
(``prefect/server/ui-v2/assets/index-*.js``, TanStack Router routes and their zod schemas):

- ``/v2/runs``: the Runs page; ``hide-subflows`` (a boolean: ``?hide-subflows=true``) is its "Hide
  subflows" switch, ``limit`` its page size (the route accepts any positive integer).
- ``/v2/artifacts/artifact/<id>``: one artifact version (tabs ``Artifact``, ``Details``, ``Raw``);
  a markdown artifact is rendered as HTML, a table artifact as a table.
- ``/v2/artifacts/key/<key>``: every version of a key, newest first, with their descriptions.
- ``/v2/runs/task-run/<id>``: a task run (tabs ``Logs``, ``Artifacts``, ``TaskInputs``, ``Details``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest
from ui_check import ERROR_MARKERS, EXCERPT_CHARS, find_chromium, render, visible_text

TASK_RUN_TABS = ("Logs", "Artifacts", "TaskInputs", "Details")
ARTIFACT_TABS = ("Artifact", "Details", "Raw")


@dataclass(frozen=True)
class Page:
    """What one rendered page showed.

    Attributes:
        url: The page rendered.
        text: Its visible text, whitespace collapsed.
        links: Its links as (text, href) pairs.
        images: Its ``<img>`` elements as (alt, src) pairs, in document order.
        screenshot: The PNG of the last render.
        attempts: Renders needed.
        seconds: Wall-clock time of all renders and pauses.
    """

    url: str
    text: str = field(repr=False)
    links: list[tuple[str, str]] = field(repr=False)
    images: list[tuple[str, str]] = field(repr=False)
    screenshot: Path
    attempts: int
    seconds: float


def require_chromium() -> str:
    """The Chromium executable; skips the test without one (fails it under ``PBG_REQUIRE_CHROMIUM=1``, as CI sets)."""
    path = find_chromium()
    if path is None:
        if os.environ.get("PBG_REQUIRE_CHROMIUM") == "1":
            pytest.fail("PBG_REQUIRE_CHROMIUM=1 but no chromium on PATH (.ci/install-chromium.sh installs it)")
        pytest.skip("no chromium on PATH (install it with .ci/install-chromium.sh, or set PBG_CHROMIUM)")
    return path


def screenshot_dir(tmp_path: Path, name: str) -> Path:
    """``$PBG_TEST_OUTPUT/<name>`` when set (CI keeps it), else ``<tmp_path>/<name>``."""
    return Path(os.environ.get("PBG_TEST_OUTPUT") or tmp_path) / name


def _base(ui_base: str) -> str:
    """The server root from a UI or API URL (``http://127.0.0.1:4200`` from ``.../api`` too)."""
    return ui_base.rstrip("/").removesuffix("/api")


def runs_url(ui_base: str, *, hide_subflows: bool, limit: int = 100) -> str:
    """The Runs page, root runs only with ``hide_subflows``, ``limit`` runs per page."""
    return f"{_base(ui_base)}/v2/runs?hide-subflows={'true' if hide_subflows else 'false'}&limit={limit}"


def artifact_url(ui_base: str, artifact_id: str, tab: str = "Artifact") -> str:
    """One artifact version's page, on ``tab`` (one of :data:`ARTIFACT_TABS`)."""
    if tab not in ARTIFACT_TABS:
        raise ValueError(f"unknown artifact tab {tab!r}; allowed: {', '.join(ARTIFACT_TABS)}")
    return f"{_base(ui_base)}/v2/artifacts/artifact/{quote(artifact_id)}?tab={tab}"


def artifact_key_url(ui_base: str, key: str) -> str:
    """The page of an artifact key: its versions, newest first."""
    return f"{_base(ui_base)}/v2/artifacts/key/{quote(key)}"


def task_run_url(ui_base: str, task_run_id: str, tab: str = "Logs") -> str:
    """One tab of a task run's page (one of :data:`TASK_RUN_TABS`)."""
    if tab not in TASK_RUN_TABS:
        raise ValueError(f"unknown task run tab {tab!r}; allowed: {', '.join(TASK_RUN_TABS)}")
    return f"{_base(ui_base)}/v2/runs/task-run/{quote(task_run_id)}?tab={tab}"


class _Images(HTMLParser):
    """Collects every ``<img>``'s alt and src (attribute values come unescaped)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.images: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            values = dict(attrs)
            self.images.append((values.get("alt") or "", values.get("src") or ""))


def images(dom: str) -> list[tuple[str, str]]:
    """The (alt, src) of every ``<img>`` of a DOM, in document order."""
    parser = _Images()
    parser.feed(dom)
    parser.close()
    return parser.images


def show_page(
    url: str,
    expect: list[str],
    screenshot: Path,
    *,
    chromium: str,
    absent: tuple[str, ...] = (),
    attempts: int = 4,
    retry_delay_s: float = 3.0,
    budget_ms: int = 15000,
) -> Page:
    """Render ``url`` until every text of ``expect`` is visible; then none of ``absent`` may be.

    A page is rendered again (up to ``attempts`` times) while texts are missing: the SQLite
    server may still be ingesting what the page lists. ``absent`` is checked on the final render
    only, once the page has loaded (a page still loading shows nothing, which proves nothing).

    Raises:
        AssertionError: A text was missing after every render, or an ``absent`` text showed; the
            message names them with the URL, the screenshot, a likely cause and a page excerpt.
    """
    started = time.monotonic()
    for attempt in range(1, attempts + 1):
        dom = render(url, screenshot, chromium=chromium, budget_ms=budget_ms)
        text, links = visible_text(dom)
        missing = [t for t in expect if t not in text]
        if not missing or attempt == attempts:
            break
        time.sleep(retry_delay_s)
    page = Page(url, text, links, images(dom), screenshot, attempt, time.monotonic() - started)
    shown = [t for t in absent if t in text]
    if missing or shown:
        raise AssertionError(_failure(page, missing, shown))
    return page


def _failure(page: Page, missing: list[str], shown: list[str]) -> str:
    """What was wrong with a page, where to look, and why it probably failed."""
    lines = [
        f"page {page.url}: missing {missing}, showing {shown} after {page.attempts} render(s)",
        f"  screenshot: {page.screenshot}",
    ]
    lines += [f"  likely cause: {cause}" for marker, cause in ERROR_MARKERS.items() if marker in page.text]
    lines.append(f"  page text: {page.text[:EXCERPT_CHARS]}")
    return "\n".join(lines)
