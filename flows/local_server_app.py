"""The ASGI app of the embedded Prefect API server (runs inside its own process).

Prefect's own server app, unchanged, behind two small wrappers: :func:`warm_up_after_startup`
(a few read-only requests once it has started, so the run's first requests do not pay for
its lazy set-up) and :func:`retry_busy_writes`.
Prefect answers ``503 Service Unavailable`` when SQLite reports "database is locked": a
retryable error, the request's transaction was rolled back. Its client then waits
``2 ** attempt`` seconds, so each collision between one of the flow's writes and the
server's own writers (task-run recorder, event persister) stalled the flow for about 2 s;
and after 5 attempts it gives up, failing the run. The wrapper instead replays a write that
got a 503 inside the server, after 10 ms, then 20, 40, ... (at most 200 ms apart, for up to
:data:`REPLAY_BUDGET_SECONDS`): SQLite releases its lock within milliseconds, so the client
sees one slightly slower answer. Replaying is what the client would do; the server only does
it sooner. Reads, websockets and other protocols pass through untouched.

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

REPLAY_BUDGET_SECONDS = 30.0
FIRST_DELAY_SECONDS = 0.01
MAX_DELAY_SECONDS = 0.2
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def retry_busy_writes(app: ASGIApp, budget: float = REPLAY_BUDGET_SECONDS) -> ASGIApp:
    """Wrap ``app`` so that a write answered with 503 is replayed inside the server (see module docstring)."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in WRITE_METHODS:
            await app(scope, receive, send)
            return
        body = await _read_body(receive)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        delay = FIRST_DELAY_SECONDS
        while True:
            answer = await _answer(app, scope, body)
            if answer[0]["status"] != 503 or loop.time() + delay > deadline:
                break
            await asyncio.sleep(delay)
            delay = min(2 * delay, MAX_DELAY_SECONDS)
        for message in answer:
            await send(message)

    return wrapped


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away: nothing to answer
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _answer(app: ASGIApp, scope: Scope, body: bytes) -> list[Message]:
    """Run ``app`` on a buffered request; returns the response messages it sent.

    The app gets a copy of ``scope``: routing writes into the scope it is given (root path,
    route, path parameters), and a replay must start from the request as it arrived.

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
        await app(dict(scope), receive, send)
    except Exception:
        # Starlette re-raises an error after its handler has answered (Prefect's answers 503
        # for "database is locked", 500 otherwise, and logs the latter): keep that answer.
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
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0),
    }


def create_app() -> ASGIApp:
    """Prefect's server app (ephemeral mode: no UI, local-run services), busy writes replayed,
    warmed up in the background once started."""
    from prefect.server.api.server import create_app as prefect_create_app

    return warm_up_after_startup(retry_busy_writes(prefect_create_app(ephemeral=True, final=True)))


def serve(fd: int) -> None:
    """Serve :func:`create_app` on the inherited listening socket ``fd`` until SIGTERM/SIGINT."""
    import uvicorn

    listener = socket.socket(fileno=fd)  # family, type and protocol are read from the socket
    config = uvicorn.Config(
        create_app, factory=True, lifespan="on", log_level="error", timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    server.handle_exit = _exit_now_unless_started(server)  # type: ignore[method-assign]
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
