"""The ASGI app of the embedded Prefect API server (runs inside its own process).

Prefect's own server app, unchanged, with its SQLite write transactions begun IMMEDIATE
(:mod:`flows.prefect_server`: a write that meets another one waits for SQLite's lock instead of
being refused with "database is locked", which Prefect answered 503 and its client retried
after 2 s), behind :func:`warm_up_after_startup` (a few read-only requests once it has started,
so the run's first requests do not pay for its lazy set-up).

Started by :mod:`flows.local_server` as ``python -m flows.local_server_app FD``: uvicorn serves on
the listening socket the command bound and passed as file descriptor ``FD``. (Not ``uvicorn --fd``:
it takes such a socket for a Unix one, so asyncio leaves Nagle's algorithm on and every response
waits ~40 ms for a delayed ACK.)
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def _answer(app: ASGIApp, scope: Scope, body: bytes) -> list[Message]:
    """Run ``app`` on a request whose body is ``body``; returns the response messages it sent.

    Raises:
        Exception: what the app raised before answering anything.
    """
    sent: list[Message] = []
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if delivered:  # the app waits for a disconnect only after its response: never comes
            await asyncio.Event().wait()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    try:
        await app(scope, receive, send)
    except Exception:
        # Starlette re-raises an error after its handler has answered (and logged it): keep that answer.
        if not sent:
            raise
    return sent


WARM_UP_REQUESTS = (("GET", "/api/admin/version", b""), ("POST", "/api/flow_runs/filter", b'{"limit": 1}'))


def warm_up_after_startup(app: ASGIApp) -> ASGIApp:
    """Wrap ``app`` so that, once it has started, a few read-only requests run in the background.

    The first request to any API route builds every route's dependencies (~0.25 s here) and
    the first queries compile their SQL: without this, the run's first requests paid for it
    while the command waited.
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


async def _warm_up(app: ASGIApp) -> None:
    for method, path, body in WARM_UP_REQUESTS:
        try:
            await _answer(app, _request_scope(method, path), body)
        except Exception:  # noqa: BLE001 - an optimisation only: the real requests will say what is wrong
            return


def _request_scope(method: str, path: str) -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
    }


def create_app() -> ASGIApp:
    """Prefect's server app (ephemeral mode: no UI, local-run services), SQLite writes begun
    IMMEDIATE (:mod:`flows.prefect_server`), warmed up in the background once started."""
    from prefect.server.api.server import create_app as prefect_create_app

    from flows.prefect_server import install_immediate_writes

    install_immediate_writes()
    return warm_up_after_startup(prefect_create_app(ephemeral=True, final=True))


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
