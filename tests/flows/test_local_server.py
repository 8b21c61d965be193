"""The embedded Prefect API server: Retry-After on 503, start/stop, fate bound to its parent."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from flows.local_server import LocalServerError, start_local_server
from flows.local_server_app import with_retry_after


def _call(app: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    """Run an ASGI app once and return the messages it sent."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def _app_answering(status: int, headers: list[tuple[bytes, bytes]]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})
    return app


def test_a_503_gets_a_short_retry_after() -> None:
    sent = _call(with_retry_after(_app_answering(503, [(b"content-type", b"application/json")])), {"type": "http"})
    assert sent[0]["status"] == 503
    assert (b"retry-after", b"0.05") in sent[0]["headers"]
    assert (b"content-type", b"application/json") in sent[0]["headers"]
    assert sent[1]["body"] == b"{}"


def test_a_503_retry_after_replaces_the_apps_own() -> None:
    sent = _call(with_retry_after(_app_answering(503, [(b"Retry-After", b"30")])), {"type": "http"})
    assert [h for h in sent[0]["headers"] if h[0].lower() == b"retry-after"] == [(b"retry-after", b"0.05")]


def test_other_responses_and_other_protocols_pass_through() -> None:
    ok = _call(with_retry_after(_app_answering(200, [(b"x", b"y")])), {"type": "http"})
    assert ok[0]["headers"] == [(b"x", b"y")]
    seen: list[str] = []

    async def lifespan_app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    _call(with_retry_after(lifespan_app), {"type": "lifespan"})
    assert seen == ["lifespan"]


@pytest.fixture()
def prefect_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh PREFECT_HOME (the server creates its SQLite database there)."""
    home = tmp_path / "prefect_home"
    monkeypatch.setenv("PREFECT_HOME", str(home))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    return home


def test_the_server_answers_runs_in_its_own_session_and_stops_cleanly(prefect_home: Path) -> None:
    server = start_local_server()
    try:
        assert server.api_url.startswith("http://127.0.0.1:")
        server.wait_ready()
        # Its own session: a terminal Ctrl-C reaches the command, which stops it in order.
        assert os.getpgid(server.process.pid) != os.getpgid(0)
    finally:
        server.stop()
    assert server.process.returncode in (0, -signal.SIGTERM)
    assert (prefect_home / "prefect.db").exists()


def test_a_server_that_cannot_start_is_one_clear_error(prefect_home: Path) -> None:
    server = start_local_server(python=sys.executable, module="no_such_module_for_pbg")
    try:
        with pytest.raises(LocalServerError) as raised:
            server.wait_ready(timeout=30)
    finally:
        server.stop()
    message = str(raised.value)
    assert "exited with status 1; to use a running Prefect server instead, set PREFECT_API_URL" in message
    assert "No module named no_such_module_for_pbg" in message  # the tail of what it printed


def test_the_server_dies_with_the_command_even_on_kill_9(prefect_home: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "server.pid"
    script = textwrap.dedent(f"""
        import time
        from flows.local_server import start_local_server
        server = start_local_server()
        open({str(pid_file)!r}, "w").write(str(server.process.pid))
        time.sleep(600)
    """)
    command = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the command did not start its server"
            time.sleep(0.05)
        server_pid = int(pid_file.read_text())
    finally:
        command.kill()
        command.wait()
    deadline = time.monotonic() + 20
    while _alive(server_pid):
        assert time.monotonic() < deadline, f"server {server_pid} outlived its killed parent"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone: it only waits to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
