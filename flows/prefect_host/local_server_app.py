"""The ASGI app of the embedded Prefect API server (runs inside its own process).

Prefect's own server app, unchanged, with its SQLite write transactions begun IMMEDIATE
(:mod:`flows.prefect_host.prefect_server`: a write that meets another one waits for SQLite's lock instead of
being refused with "database is locked", which Prefect answered 503 and its client retried
after 2 s), behind :func:`warm_up_after_startup` (a few read-only requests once it has started,
so the run's first requests do not pay for its lazy set-up), and :func:`one_start_at_a_time`
(two commands starting on one new PREFECT_HOME would both run its database migrations, and one
died with "No such index").

Started by :mod:`flows.prefect_host.local_server` as ``python -m flows.prefect_host.local_server_app FD``: uvicorn serves on
the listening socket the command bound and passed as file descriptor ``FD``. (Not ``uvicorn --fd``:
it takes such a socket for a Unix one, so asyncio leaves Nagle's algorithm on and every response
waits ~40 ms for a delayed ACK.)
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from storage import layout

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


WARM_UP_REQUESTS = (("GET", "/api/admin/version", b""), ("POST", "/api/flow_runs/filter", b'{"limit": 1}'))


def warm_up_after_startup(app: ASGIApp) -> ASGIApp:
    """Wrap ``app`` so that, once it has started, a few read-only requests run in the background.

    The first request to any API route builds every route's dependencies and the first
    queries compile their SQL: without this, the run's first requests paid for it while the
    command waited (measured 2026-12-04: the first three requests 240-290 ms without, 25-50 ms
    with). The requests go through httpx's ASGI transport, in this process, not over a socket.
    """

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def send_then_warm(message: Message) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                asyncio.get_running_loop().create_task(_warm_up(app))

        await app(scope, receive, send_then_warm)

    return wrapped


def one_start_at_a_time(app: ASGIApp, lock_path: Path) -> ASGIApp:
    """Wrap ``app`` so that its start-up (Prefect's database migrations) holds ``lock_path``.

    An exclusive ``flock`` from the lifespan's start until start-up completed or failed: a
    second server on the same PREFECT_HOME waits, then finds the migrations done. The lock
    goes with the process if it dies.
    """

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(lock_path, "a+b")  # noqa: SIM115 - closed when start-up ends, in send_then_release
        await asyncio.to_thread(fcntl.flock, lock.fileno(), fcntl.LOCK_EX)

        async def send_then_release(message: Message) -> None:
            if message["type"] in ("lifespan.startup.complete", "lifespan.startup.failed"):
                lock.close()  # releases the lock (closing again later is a no-op)
            await send(message)

        try:
            await app(scope, receive, send_then_release)
        finally:
            lock.close()

    return wrapped


async def _warm_up(app: ASGIApp) -> None:
    """Send :data:`WARM_UP_REQUESTS` to ``app`` in this process (httpx's ASGI transport: no socket)."""
    import httpx  # already loaded by Prefect's server modules

    # raise_app_exceptions=False: Starlette re-raises an error after its handler has answered
    # (and logged it); the answer is all a warm-up needs.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for method, path, body in WARM_UP_REQUESTS:
            try:
                await client.request(method, path, content=body, headers={"content-type": "application/json"})
            except Exception:  # noqa: BLE001 - an optimisation only: the real requests will say what is wrong
                return


def create_app() -> ASGIApp:
    """Prefect's server app (ephemeral mode: no UI, local-run services), SQLite writes begun
    IMMEDIATE (:mod:`flows.prefect_host.prefect_server`), warmed up in the background once started."""
    from prefect.server.api.server import create_app as prefect_create_app
    from prefect.settings import get_current_settings

    from flows.prefect_host.prefect_server import install_immediate_writes

    install_immediate_writes()
    app = warm_up_after_startup(prefect_create_app(ephemeral=True, final=True))
    return one_start_at_a_time(app, Path(get_current_settings().home) / layout.SERVER_STARTUP_LOCK_FILE)


def serve(fd: int) -> None:
    """Serve :func:`create_app` on the inherited listening socket ``fd`` until SIGTERM/SIGINT."""
    import uvicorn

    listener = socket.socket(fileno=fd)  # family, type and protocol are read from the socket
    config = uvicorn.Config(
        create_app,
        factory=True,
        lifespan="on",
        log_level="error",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    server.handle_exit = _exit_now_unless_started(server)  # type: ignore[method-assign,assignment]  # a replacement handler, by design
    server.run(sockets=[listener])
    # Stopped and flushed: skip the interpreter's teardown of Prefect's server modules.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _exit_now_unless_started(server: Any) -> Callable[[int, Any], None]:
    """uvicorn's SIGTERM/SIGINT handler, except that before start-up has finished it exits at once.

    uvicorn records the signal and lets the start-up (Prefect's database migrations: 30 s
    or more on a new PREFECT_HOME) run to its end before shutting down: a command
    interrupted while its server starts waited for that. Nothing has been served yet, and
    SQLite rolls back the migration in progress, so there is nothing to flush.
    """
    graceful = server.handle_exit

    def handle_exit(sig: int, frame: Any) -> None:
        if not server.started:
            os._exit(128 + sig)
        graceful(sig, frame)

    return handle_exit


if __name__ == "__main__":
    serve(int(sys.argv[1]))
