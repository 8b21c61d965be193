"""flows.prefect_host.local_server_app: the background warm-up of the embedded server's app, on a real Starlette app;
one start-up at a time per PREFECT_HOME."""

from __future__ import annotations

import asyncio
import fcntl
import threading
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from flows.prefect_host.local_server_app import WARM_UP_REQUESTS, one_start_at_a_time, warm_up_after_startup


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


def test_a_second_start_up_waits_for_the_first_ones_lock(tmp_path: Path) -> None:
    """Two servers on one new PREFECT_HOME: the second's start-up (migrations) waits for the first's."""
    lock_path = tmp_path / "home" / "startup.lock"
    started = threading.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:  # a lifespan that only starts
        await receive()
        started.set()
        await send({"type": "lifespan.startup.complete"})

    async def start() -> None:
        async def send(message: Any) -> None:
            pass

        async def receive() -> dict[str, str]:
            return {"type": "lifespan.startup"}

        await one_start_at_a_time(app, lock_path)({"type": "lifespan"}, receive, send)

    lock_path.parent.mkdir()
    with open(lock_path, "a+b") as held:  # the first server, mid-migration
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        second = threading.Thread(target=asyncio.run, args=(start(),))
        second.start()
        assert not started.wait(0.5)
    second.join(5)  # the first released its lock by closing it
    assert started.is_set() and not second.is_alive()
    with open(lock_path, "a+b") as again:  # and the second released its own
        fcntl.flock(again.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
