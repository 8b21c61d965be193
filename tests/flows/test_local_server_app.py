"""flows.local_server_app: the background warm-up of the embedded server's app, on a real Starlette app."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from flows.local_server_app import WARM_UP_REQUESTS, warm_up_after_startup


def recording_app(seen: list[tuple[str, str, bytes]], fail: bool = False) -> Starlette:
    """An app answering every warm-up path and recording (method, path, body); ``fail``: raise after answering."""

    async def endpoint(request: Request) -> JSONResponse:
        seen.append((request.method, request.url.path, await request.body()))
        if fail:
            raise RuntimeError("handler bug")
        return JSONResponse({"ok": True})

    routes = [Route(path, endpoint, methods=[method]) for method, path, _ in WARM_UP_REQUESTS]
    return Starlette(routes=routes)


async def start_and_wait(app: Any, seen: list[Any], expected: int) -> None:
    """Run the app's lifespan start-up as uvicorn does, then wait for ``expected`` warm-up requests."""
    messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await messages.put({"type": "lifespan.startup"})
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(dict(message))

    lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, messages.get, send))
    for _ in range(500):
        if len(seen) >= expected:
            break
        await asyncio.sleep(0.01)
    await messages.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(lifespan, 5)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]


def test_the_warm_up_requests_reach_the_app_once_it_has_started() -> None:
    seen: list[tuple[str, str, bytes]] = []
    asyncio.run(start_and_wait(warm_up_after_startup(recording_app(seen)), seen, len(WARM_UP_REQUESTS)))
    assert seen == list(WARM_UP_REQUESTS)


def test_a_handler_error_after_its_answer_does_not_stop_the_warm_up() -> None:
    seen: list[tuple[str, str, bytes]] = []
    asyncio.run(start_and_wait(warm_up_after_startup(recording_app(seen, fail=True)), seen, len(WARM_UP_REQUESTS)))
    assert seen == list(WARM_UP_REQUESTS)
