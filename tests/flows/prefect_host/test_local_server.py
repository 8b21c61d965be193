"""The embedded Prefect API server: start/stop, warm-up, fate bound to its parent."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from process_state import running

from flows.prefect_host.local_server import LocalServerError, server_settings, start_local_server
from flows.prefect_host.local_server_app import warm_up_after_startup


def _call(app: Any, scope: dict[str, Any], body: bytes = b"{}") -> list[dict[str, Any]]:
    """Run an ASGI app once on a request with ``body``; returns the messages it sent."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


@pytest.fixture()
def prefect_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh PREFECT_HOME (the server creates its SQLite database there)."""
    home = tmp_path / "prefect_home"
    monkeypatch.setenv("PREFECT_HOME", str(home))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    return home


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
        from flows.prefect_host.local_server import start_local_server
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
    while running(server_pid):
        assert time.monotonic() < deadline, f"server {server_pid} outlived its killed parent"
        time.sleep(0.1)


def test_the_app_is_warmed_up_in_the_background_once_started() -> None:
    seen: list[tuple[str, str]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            return
        seen.append((scope["method"], scope["path"]))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def start() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "lifespan.startup"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await warm_up_after_startup(app)({"type": "lifespan"}, receive, send)
        await asyncio.sleep(0.05)  # the warm-up runs after startup is reported
        return sent

    assert asyncio.run(start()) == [{"type": "lifespan.startup.complete"}]
    assert seen == [("GET", "/api/admin/version"), ("POST", "/api/flow_runs/filter")]


@pytest.mark.parametrize(("value", "kept"), [("", False), ("0", False), ("1", True), ("true", True), ("YES", True)])
def test_events_are_stored_only_when_asked(value: str, kept: bool) -> None:
    settings = server_settings({"PBG_KEEP_EVENTS": value} if value else {})
    assert ("PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED" not in settings) is kept
    assert settings["PREFECT_UI_ENABLED"] == "false"


def _post_event_and_stop(event_id: str) -> None:
    """Start the server, check it answers in its own session, post one event, stop it cleanly."""
    body = (
        '[{"occurred": "2026-12-04T00:00:00Z", "event": "pbg.test.kept", "id": "%s", '
        '"resource": {"prefect.resource.id": "pbg.test"}}]' % event_id
    ).encode()
    server = start_local_server()
    try:
        assert server.api_url.startswith("http://127.0.0.1:")
        server.wait_ready()
        # Its own session: a terminal Ctrl-C reaches the command, which stops it in order.
        assert os.getpgid(server.process.pid) != os.getpgid(0)
        request = urllib.request.Request(
            f"{server.api_url}/events", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 204
    finally:
        server.stop()  # a kept event persister flushes what it holds as it stops
    assert server.process.returncode in (0, -signal.SIGTERM)


@pytest.mark.slow
def test_the_server_answers_in_its_own_session_stops_cleanly_and_stores_events_only_with_pbg_keep_events(
    prefect_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two starts on one PREFECT_HOME (the first creates the database): one server start per
    setting of PBG_KEEP_EVENTS, each also checked for its session and its clean stop."""
    dropped, kept = str(uuid.uuid4()), str(uuid.uuid4())
    monkeypatch.delenv("PBG_KEEP_EVENTS", raising=False)
    _post_event_and_stop(dropped)
    assert (prefect_home / "prefect.db").exists()
    monkeypatch.setenv("PBG_KEEP_EVENTS", "1")
    _post_event_and_stop(kept)
    with sqlite3.connect(prefect_home / "prefect.db") as db:
        stored = {row[0] for row in db.execute("SELECT id FROM events WHERE id IN (?, ?)", (dropped, kept))}
    assert stored == {kept}


def test_the_loopback_ca_file_holds_one_root_of_certifis_bundle() -> None:
    import ssl

    import certifi

    from flows.prefect_host.local_server import loopback_ca_file

    path = loopback_ca_file()
    assert path is not None and path.startswith("/proc/self/fd/") and loopback_ca_file() == path
    pem = Path(path).read_text()
    assert pem.count("BEGIN CERTIFICATE") == 1 and pem in Path(certifi.where()).read_text()
    context = ssl.create_default_context(cafile=path)
    assert len(context.get_ca_certs()) == 1


def test_prefects_client_trusts_only_that_root_when_pointed_at_it() -> None:
    from prefect.client.orchestration import PrefectClient
    from prefect.settings import PREFECT_API_SSL_CERT_FILE, temporary_settings

    from flows.prefect_host.local_server import loopback_ca_file

    with temporary_settings(updates={PREFECT_API_SSL_CERT_FILE: loopback_ca_file()}):
        client = PrefectClient("http://127.0.0.1:9/api")
    # httpx keeps the TLS context Prefect built from the file in its connection pool.
    assert len(client._client._transport._pool._ssl_context.get_ca_certs()) == 1


@pytest.mark.parametrize("preset", [None, "/etc/ssl/certs/ca-certificates.crt"])
def test_local_api_names_the_ca_file_unless_one_is_set(prefect_home: Path, preset: str | None) -> None:
    script = textwrap.dedent("""
        import os
        from flows.prefect_host.local_server import local_api
        with local_api(enabled=True):
            print(os.environ["PREFECT_API_SSL_CERT_FILE"])
    """)
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_SSL_CERT_FILE"}
    if preset is not None:
        env["PREFECT_API_SSL_CERT_FILE"] = preset
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    used = done.stdout.strip().splitlines()[-1]
    assert used == preset if preset is not None else used.startswith("/proc/self/fd/")


def test_a_server_stopped_while_it_migrates_a_new_database_exits_at_once(prefect_home: Path) -> None:
    """uvicorn would finish the start-up (Prefect's migrations, 30 s or more) before shutting down."""
    server = start_local_server()
    try:
        deadline = time.monotonic() + 120
        while not (prefect_home / "prefect.db").exists():  # the migrations have begun
            assert server.process.poll() is None and time.monotonic() < deadline, server.log_tail()
            time.sleep(0.01)
        server.process.terminate()
        server.process.wait(60)
        tail = server.log_tail()
    finally:
        server.stop()
    # 128 + SIGTERM: our handler's immediate exit, not uvicorn's re-raise after a full start-up.
    assert server.process.returncode == 128 + signal.SIGTERM, tail
