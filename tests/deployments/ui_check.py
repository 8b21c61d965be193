"""Headless-Chromium check of a flow run's page in the Prefect UI (issue 4, bar 3).

Renders the flow run page of the Prefect 3.9 UI served by ``prefect server start`` with plain
``chromium --headless=new --dump-dom --screenshot`` subprocess calls (no Python dependency) and
looks for expected texts in the rendered DOM, one tab at a time.

Routes (read from the UI bundles in the wheel, ``prefect/server/ui-v2/assets``):

- ``/`` redirects browsers to ``/v2/`` (``server.ui.v2_enabled`` is on by default in 3.9); the
  React V2 UI has ``/v2/runs/flow-run/<id>?tab=<Tab>`` with ``Tab`` one of :data:`FLOW_RUN_TABS`.
  The Subflow Runs tab lists the child runs as links (the run graph above it is a canvas: its
  labels are not in the DOM); the Artifacts tab lists artifact type, key and description.
- The V1 (Vue) UI at ``/runs/flow-run/<id>?tab=Subflow Runs`` is not used: it hides those tabs
  until the run is loaded and falls back to ``Logs``, so a deep link cannot open them.

``--virtual-time-budget`` holds the page's clock while API requests are in flight, so one
render waits for the single-page app's data; a few fresh renders cover a server that is still
ingesting. The UI must be told the server's real address: start the server with
``PREFECT_UI_API_URL=http://127.0.0.1:<port>/api`` (``--port`` alone leaves the UI pointing
at port 4200, and every page shows "Unable to connect to Prefect server").
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

# Values of the V2 flow-run route's `tab` search parameter (its zod schema in the bundle).
FLOW_RUN_TABS = ("Logs", "TaskRuns", "SubflowRuns", "Artifacts", "Details", "Parameters", "JobVariables")

# Texts the V2 UI renders instead of the page; each maps to the likely cause.
ERROR_MARKERS = {
    "Unable to connect to Prefect server": "the UI cannot reach the API: start the server with "
    "PREFECT_UI_API_URL=http://127.0.0.1:<port>/api (see GET <ui>/ui-settings)",
    "Flow Run Not Found": "no flow run with this id on this server",
    "Failed to load flow run": "the API answered the flow run request with an error",
}

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WINDOW_SIZE = "1400,1000"
EXCERPT_CHARS = 1500


@dataclass(frozen=True)
class TabResult:
    """What one tab of the flow run page showed.

    Attributes:
        tab: The ``tab`` query value (one of :data:`FLOW_RUN_TABS`).
        url: The page rendered.
        found: The expected texts present in the page's visible text.
        links: For found texts inside a link, the ``href`` of the innermost such link (the
            subflow run's page, the artifact's page).
        screenshot: The PNG of the final render.
        attempts: Renders needed (1 when everything was there at once).
        text: The page's visible text (whitespace collapsed).
    """

    tab: str
    url: str
    found: list[str]
    links: dict[str, str]
    screenshot: Path
    attempts: int
    text: str = field(repr=False)


def find_chromium() -> str | None:
    """Path of a Chromium executable, or None.

    ``$PBG_CHROMIUM`` wins when set (an executable path); else the first of
    :data:`CHROMIUM_NAMES` on ``PATH`` (Debian's package installs ``/usr/bin/chromium``).
    """
    override = os.environ.get("PBG_CHROMIUM")
    if override:
        return override if os.access(override, os.X_OK) else None
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def flow_run_url(ui_base: str, flow_run_id: str, tab: str) -> str:
    """URL of one tab of a flow run page in the V2 UI.

    Args:
        ui_base: Where the server serves the UI, e.g. ``http://127.0.0.1:4200``; the API URL
            (``.../api``, as in PREFECT_API_URL) is accepted too.
        flow_run_id: The flow run's UUID.
        tab: One of :data:`FLOW_RUN_TABS`.

    Raises:
        ValueError: ``tab`` is not a known tab.
    """
    if tab not in FLOW_RUN_TABS:
        raise ValueError(f"unknown flow run tab {tab!r}; allowed: {', '.join(FLOW_RUN_TABS)}")
    base = ui_base.rstrip("/").removesuffix("/api")
    return f"{base}/v2/runs/flow-run/{quote(flow_run_id)}?tab={tab}"


def render(url: str, screenshot: Path, *, chromium: str, budget_ms: int = 15000, timeout_s: float = 90.0) -> str:
    """Render ``url`` in headless Chromium; save a PNG and return the DOM after the budget.

    Args:
        url: Page to open.
        screenshot: PNG to write (parent directories are created).
        chromium: Chromium executable.
        budget_ms: Virtual time the page gets to run its scripts and fetch its data.
        timeout_s: Wall-clock limit for the browser process.

    Raises:
        RuntimeError: Chromium exited with an error, timed out, or wrote no DOM.
    """
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pbg-chromium-") as profile:
        args = [
            chromium,
            "--headless=new",
            "--no-sandbox",  # CI containers run as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",  # small /dev/shm in containers crashes renderers
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",  # fresh profile: no cookie picks the V1 UI
            f"--window-size={WINDOW_SIZE}",
            f"--virtual-time-budget={budget_ms}",
            f"--screenshot={screenshot}",
            "--dump-dom",
            url,
        ]
        dom, stderr, code = _run_in_own_group(args, timeout_s)
    if code != 0 or "<html" not in dom.lower():
        tail = "\n".join(stderr.strip().splitlines()[-10:])
        raise RuntimeError(f"chromium exited with {code} on {url} (DOM {len(dom)} chars):\n{tail}")
    return dom


def _run_in_own_group(args: list[str], timeout_s: float) -> tuple[str, str, int]:
    """Run a command in its own process group; kill that group if it outlives ``timeout_s``."""
    # Chromium forks renderer/GPU processes: killing only the browser pid could leave them.
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise RuntimeError(f"chromium did not finish within {timeout_s} s: {args[-1]}") from None
    return out, err, proc.returncode


class _VisibleText(HTMLParser):
    """Collects the text a user sees (no script/style/template) and each link's text and href."""

    HIDDEN = frozenset({"script", "style", "noscript", "template", "svg"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.chunks: list[str] = []
        self.links: list[tuple[str, str]] = []
        self._hidden_depth = 0
        self._link_stack: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.HIDDEN:
            self._hidden_depth += 1
        elif tag == "a":
            self._link_stack.append((dict(attrs).get("href") or "", []))

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN:
            self._hidden_depth = max(0, self._hidden_depth - 1)
        elif tag == "a" and self._link_stack:
            href, parts = self._link_stack.pop()
            label = " ".join(" ".join(parts).split())
            if label:
                self.links.append((label, href))

    def handle_data(self, data: str) -> None:
        if self._hidden_depth:
            return
        self.chunks.append(data)
        for _, parts in self._link_stack:
            parts.append(data)


def visible_text(dom: str) -> tuple[str, list[tuple[str, str]]]:
    """The page's visible text (whitespace collapsed) and its links as (text, href) pairs."""
    parser = _VisibleText()
    parser.feed(dom)
    parser.close()
    return " ".join(" ".join(parser.chunks).split()), parser.links


def check_flow_run_page(
    ui_base: str,
    flow_run_id: str,
    expect_texts: dict[str, list[str]],
    screenshot_dir: Path,
    *,
    attempts: int = 4,
    retry_delay_s: float = 3.0,
    budget_ms: int = 15000,
    chromium: str | None = None,
) -> dict[str, TabResult]:
    """Open each requested tab of a flow run page and find the expected texts in its DOM.

    Each tab is rendered until all its texts are present or ``attempts`` renders were made
    (the SQLite server may still be ingesting). Screenshots are saved as
    ``<screenshot_dir>/flow-run-<tab>.png``.

    Args:
        ui_base: Server root serving the UI, e.g. ``http://127.0.0.1:4200`` (or its ``/api`` URL).
        flow_run_id: The flow run to open.
        expect_texts: Tab (one of :data:`FLOW_RUN_TABS`) -> texts it must show, e.g.
            ``{"SubflowRuns": ["child-1"], "Artifacts": ["metrics"]}``. The run's own name
            is in the header of every tab.
        screenshot_dir: Directory for the PNGs.
        attempts: Renders per tab before giving up.
        retry_delay_s: Pause between renders of a tab.
        budget_ms: Virtual time per render (see :func:`render`).
        chromium: Chromium executable; :func:`find_chromium` when None.

    Returns:
        Tab -> :class:`TabResult`, in the order of ``expect_texts``.

    Raises:
        ValueError: A tab is unknown, ``attempts`` < 1, or no Chromium was found.
        AssertionError: Some texts were missing after all attempts; the message lists them per
            tab with the URL, the screenshot path, a likely cause and a page-text excerpt.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    unknown = sorted(set(expect_texts) - set(FLOW_RUN_TABS))
    if unknown:
        raise ValueError(f"unknown flow run tab(s) {unknown}; allowed: {', '.join(FLOW_RUN_TABS)}")
    browser = chromium or find_chromium()
    if browser is None:
        raise ValueError(f"no Chromium found (set PBG_CHROMIUM or install one of {CHROMIUM_NAMES})")
    plan = _Plan(chromium=browser, attempts=attempts, delay_s=retry_delay_s, budget_ms=budget_ms)
    results = {
        tab: _check_tab(flow_run_url(ui_base, flow_run_id, tab), tab, texts, screenshot_dir, plan)
        for tab, texts in expect_texts.items()
    }
    failures = [
        _failure_report(result, expect_texts[tab])
        for tab, result in results.items()
        if _missing(result, expect_texts[tab])
    ]
    if failures:
        raise AssertionError(f"flow run {flow_run_id} page is missing texts:\n" + "\n\n".join(failures))
    return results


@dataclass(frozen=True)
class _Plan:
    """How to render: browser, renders per tab, pause between them, virtual time per render."""

    chromium: str
    attempts: int
    delay_s: float
    budget_ms: int


def _check_tab(url: str, tab: str, texts: list[str], screenshot_dir: Path, plan: _Plan) -> TabResult:
    """Render one tab until all ``texts`` show up or the attempts run out."""
    shot = Path(screenshot_dir) / f"flow-run-{tab}.png"
    for attempt in range(1, plan.attempts + 1):
        text, links = visible_text(render(url, shot, chromium=plan.chromium, budget_ms=plan.budget_ms))
        found = [t for t in texts if t in text]
        if len(found) == len(texts) or attempt == plan.attempts:
            break
        time.sleep(plan.delay_s)
    return TabResult(
        tab=tab,
        url=url,
        found=found,
        links={t: href for t in found if (href := _innermost_link(t, links)) is not None},
        screenshot=shot,
        attempts=attempt,
        text=text,
    )


def _innermost_link(text: str, links: list[tuple[str, str]]) -> str | None:
    """Href of the link with the shortest text that contains ``text``, if any."""
    containing = [(len(label), href) for label, href in links if text in label]
    return min(containing)[1] if containing else None


def _missing(result: TabResult, expected: list[str]) -> list[str]:
    return [t for t in expected if t not in result.found]


def _failure_report(result: TabResult, expected: list[str]) -> str:
    """Missing texts of one tab, where to look, and why it probably failed."""
    causes = [cause for marker, cause in ERROR_MARKERS.items() if marker in result.text]
    lines = [
        f"tab {result.tab}: missing {_missing(result, expected)} (found {result.found}) "
        f"after {result.attempts} render(s)",
        f"  url: {result.url}",
        f"  screenshot: {result.screenshot}",
    ]
    lines += [f"  likely cause: {cause}" for cause in causes]
    lines.append(f"  page text: {result.text[:EXCERPT_CHARS]}")
    return "\n".join(lines)
