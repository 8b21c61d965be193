"""The ASGI app of the embedded Prefect API server (runs inside its own process).

Prefect's own server app, unchanged, behind one small wrapper: a ``503 Service Unavailable``
(what Prefect answers when SQLite reports "database is locked", a retryable error) gets a
``Retry-After`` header of :data:`RETRY_AFTER_SECONDS`. Prefect's client honours that header;
without it the client backs off ``2 ** attempt`` seconds, so each lock collision between a
request and the server's own writers (task-run recorder, event persister) stalled the flow
for about 2 s. Collisions are short: SQLite releases the lock within milliseconds.

Started by :mod:`flows.local_server` as ``python -m flows.local_server_app FD``: uvicorn serves on
the listening socket the command bound and passed as file descriptor ``FD``. (Not ``uvicorn --fd``:
it takes such a socket for a Unix one, so asyncio leaves Nagle's algorithm on and every response
waits ~40 ms for a delayed ACK.)
"""

from __future__ import annotations

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

RETRY_AFTER_SECONDS = "0.05"


def with_retry_after(app: ASGIApp, seconds: str = RETRY_AFTER_SECONDS) -> ASGIApp:
    """Wrap ``app`` so that every HTTP 503 response carries ``Retry-After: seconds``."""
    header = (b"retry-after", seconds.encode())

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_with_retry_after(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 503:
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"retry-after"]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        await app(scope, receive, send_with_retry_after)

    return wrapped


def create_app() -> ASGIApp:
    """Prefect's server app (ephemeral mode: no UI, local-run services) with Retry-After on 503."""
    from prefect.server.api.server import create_app as prefect_create_app

    return with_retry_after(prefect_create_app(ephemeral=True, final=True))


def serve(fd: int) -> None:
    """Serve :func:`create_app` on the inherited listening socket ``fd`` until SIGTERM/SIGINT."""
    import uvicorn

    listener = socket.socket(fileno=fd)  # family, type and protocol are read from the socket
    config = uvicorn.Config(
        create_app, factory=True, lifespan="on", log_level="error", timeout_graceful_shutdown=5,
    )
    uvicorn.Server(config).run(sockets=[listener])
    # Stopped and flushed: skip the interpreter's teardown of Prefect's server modules.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
