"""A fault-injecting HTTP reverse proxy in front of the test S3 server (fault tests).

Restarting moto loses its data, so a "stopped S3 server" is simulated in front of it:
:class:`S3Proxy` listens on a free port of 127.0.0.1 and forwards every request (method,
path, query, headers, body streamed, ``Content-Length`` or chunked; :mod:`s3_relay`) to moto
and the answer back, with faults switchable at run time:

- :meth:`S3Proxy.down` / :meth:`S3Proxy.set_down`: the server looks stopped. The listening
  socket is closed (new connections get ``ECONNREFUSED``) and open keep-alive connections
  are cut; coming back up listens again on the same port. The storage layer treats a refused
  connection to a loopback address as permanent (nothing listens there), so this is the
  fault of "the server is not running".
- :meth:`S3Proxy.down` with ``mode="reset"``: the server looks like a remote one that is
  restarting behind its address: it keeps listening, but every connection, open or new, is
  reset (``ECONNRESET``). That stays transient, so it is the outage retries must bridge.
- :meth:`S3Proxy.error_share`: a seeded share of requests is answered with an S3 error
  (``503 SlowDown``, ``500 InternalError``, ...) and a proper XML body, without reaching moto.
  Whether a request faults is drawn from ``(seed, method, key, n)`` (``key``: the path
  without the bucket, which tests pick at random) where ``n`` counts the earlier requests
  of the same method and key, so the faults do not depend on how threads (a lease renewer,
  a task retry) interleave their requests, and a seed gives the same faults in every session.
- :meth:`S3Proxy.when`: run an action (e.g. go down) once, after the first forwarded answer
  that matches a predicate (e.g. the first commit of ``checkpoint_version.txt``).

Counters (:meth:`S3Proxy.counters`): requests forwarded, faults injected by kind
(``"503 SlowDown"``, ``"500 InternalError"``, ``"outage"``, ``"dropped"`` connections).

Fixture ``s3_proxy`` (function-scoped): a proxy in front of the session ``s3_server`` with
``AWS_ENDPOINT_URL`` pointing at it for the duration of the test. Test modules import it
(``from s3_proxy import s3_proxy``) unless ``tests/conftest.py`` re-exports it.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
import s3fs
from s3_relay import RelayHandler, RelayServer, cut, reset

from bench.lib.s3_server import HOST, S3Server, free_port

RequestMatch = Callable[[str, str, int], bool]


@dataclass
class _ErrorPlan:
    """Which share of requests faults, and with which (status, code) answers."""

    share: float = 0.0
    kinds: tuple[tuple[int, str], ...] = ((503, "SlowDown"),)
    seed: int = 0
    seen: Counter[tuple[str, str]] = field(default_factory=Counter)

    def draw(self, method: str, path: str) -> tuple[int, str] | None:
        """The fault answering this request, or None to forward it (seeded per method, path, n)."""
        if self.share <= 0.0:
            return None
        key = (method, path.lstrip("/").partition("/")[2])  # without the (random) bucket name
        n = self.seen[key]
        self.seen[key] += 1
        digest = hashlib.sha256(f"{self.seed}\n{key[0]}\n{key[1]}\n{n}".encode()).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 >= self.share:
            return None
        return self.kinds[digest[8] % len(self.kinds)]


@dataclass
class _Trigger:
    match: RequestMatch
    action: Callable[[], None]
    fired: bool = False


class S3Proxy:
    """A reverse proxy to ``upstream_url`` on 127.0.0.1 with switchable faults.

    Args:
        upstream_url: The real server, e.g. ``http://127.0.0.1:5000``.
        port: The port to listen on (0: a free one, kept across outages).
    """

    def __init__(self, upstream_url: str, port: int = 0) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"upstream_url {upstream_url!r}: expected http://<host>:<port>")
        self.upstream = (parts.hostname, parts.port)
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._errors = _ErrorPlan()
        self._counts: Counter[str] = Counter()
        self._triggers: list[_Trigger] = []
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._up_timer: threading.Timer | None = None
        self._down = True
        self._resetting = False

    # -- life cycle ------------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:<port>``: what clients use instead of the server's URL."""
        return f"http://{HOST}:{self.port}"

    @property
    def is_down(self) -> bool:
        """Whether the proxy refuses connections now (set once an outage is complete)."""
        return self._down

    def start(self) -> None:
        """Listen on the port (no-op when already up)."""
        with self._lock:
            if self._server is not None:
                return
            server = RelayServer((HOST, self.port), RelayHandler)
            server.proxy = self
            self._server = server
            self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="s3-proxy", daemon=True)
            self._thread.start()
            self._down = False

    def stop(self) -> None:
        """Stop listening and cut every open connection (what :meth:`set_down` (True) does)."""
        with self._lock:
            server, self._server = self._server, None
            connections = list(self._connections)
        if server is None:
            return
        server.shutdown()
        server.server_close()
        for conn in connections:
            cut(conn)
        with self._lock:
            self._counts["dropped"] += len(connections)
            self._down = True

    def close(self) -> None:
        """Stop for good: cancel a pending come-back and stop listening."""
        if self._up_timer is not None:
            self._up_timer.cancel()
        self.stop()

    # -- faults ----------------------------------------------------------------------------

    def set_down(self, down: bool) -> None:
        """Look stopped (refuse connections, cut open ones) or serve again on the same port."""
        if down:
            if not self.is_down:
                with self._lock:
                    self._counts["outage"] += 1
            self.stop()
        else:
            self.start()

    def set_resetting(self, resetting: bool) -> None:
        """Reset every connection, open and new, while listening on (or serve normally again)."""
        with self._lock:
            if resetting and not self._resetting:
                self._counts["outage"] += 1
            self._resetting = resetting
            connections = list(self._connections) if resetting else []
            self._counts["dropped"] += len(connections)
        for conn in connections:
            cut(conn)  # a handler thread holds it open: cut it (the client sees the connection end)

    def down(self, seconds: float, mode: str = "refuse") -> threading.Timer:
        """Go down now and come back up after ``seconds`` (in the background).

        Args:
            seconds: How long the outage lasts.
            mode: ``"refuse"``: stop listening (connections refused); ``"reset"``: keep
                listening and reset every connection (see the module docstring).

        Returns:
            The timer that brings the proxy back; ``join()`` it to wait for the come-back.
        """
        if seconds <= 0:
            raise ValueError(f"seconds={seconds!r}: expected a duration > 0")
        if mode not in ("refuse", "reset"):
            raise ValueError(f"mode={mode!r}: expected 'refuse' or 'reset'")
        if self._up_timer is not None:
            self._up_timer.cancel()  # the longer outage wins, not an earlier come-back
        switch = self.set_down if mode == "refuse" else self.set_resetting
        switch(True)
        timer = threading.Timer(seconds, switch, args=(False,))
        timer.daemon = True
        self._up_timer = timer
        timer.start()
        return timer

    def error_share(
        self,
        p: float,
        status: int = 503,
        code: str = "SlowDown",
        *,
        mix: Sequence[tuple[int, str]] = (),
        seed: int = 0,
    ) -> None:
        """Answer a seeded share ``p`` of requests with an S3 error instead of forwarding them.

        Args:
            p: The share of requests to fault, in [0, 1] (0 turns faults off).
            status: HTTP status of the error answer.
            code: S3 error code in the XML body (``SlowDown``, ``InternalError``, ...).
            mix: More (status, code) kinds; each fault picks one of all kinds uniformly.
            seed: Seed of the draws.
        """
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p={p!r}: expected a share in [0, 1]")
        kinds = ((status, code), *mix)
        for kind_status, _ in kinds:
            if not 400 <= kind_status <= 599:
                raise ValueError(f"status {kind_status!r}: expected an HTTP error status 400-599")
        with self._lock:
            self._errors = _ErrorPlan(share=p, kinds=kinds, seed=seed)

    def when(self, match: RequestMatch, action: Callable[[], None]) -> None:
        """Run ``action`` once in a new thread after the first forwarded answer that ``match``es.

        Args:
            match: ``match(method, path, status) -> bool`` (path without the query).
            action: What to do, e.g. ``lambda: proxy.down(3)``.
        """
        with self._lock:
            self._triggers.append(_Trigger(match, action))

    # -- counters --------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """A snapshot: ``forwarded`` plus faults injected by kind (e.g. ``"503 SlowDown"``)."""
        with self._lock:
            return dict(self._counts)

    def faults(self) -> dict[str, int]:
        """Faults injected by kind (everything but ``forwarded``)."""
        return {k: v for k, v in self.counters().items() if k != "forwarded"}

    # -- used by the relay (s3_relay.ProxyControl) -----------------------------------------

    def register(self, conn: socket.socket, add: bool) -> None:
        """Track an open client connection (``add``) or forget it; cut it if the proxy went down meanwhile."""
        with self._lock:
            if not add:
                self._connections.discard(conn)
                return
            if self._server is not None:
                self._connections.add(conn)
                return
        cut(conn)  # accepted just before the outage began: cut like the others

    def accepts(self, conn: socket.socket) -> bool:
        """False (after resetting ``conn``) while connections are reset; called right after accept."""
        with self._lock:
            if not self._resetting:
                return True
            self._counts["dropped"] += 1
        reset(conn)
        return False

    def draw_fault(self, method: str, path: str) -> tuple[int, str] | None:
        """The injected fault answering this request, counted, or None to forward it."""
        with self._lock:
            fault = self._errors.draw(method, path)
            if fault is not None:
                self._counts[f"{fault[0]} {fault[1]}"] += 1
            return fault

    def forwarded(self) -> None:
        """Count an answer upstream gave, before it is relayed: a client holding it sees it counted."""
        with self._lock:
            self._counts["forwarded"] += 1

    def answered(self, method: str, path: str, status: int) -> None:
        """Fire the triggers a relayed answer matches (each once, in its own thread)."""
        fire = []
        with self._lock:
            for trigger in self._triggers:
                if not trigger.fired and trigger.match(method, path, status):
                    trigger.fired = True
                    fire.append(trigger.action)
        for action in fire:
            threading.Thread(target=action, name="s3-proxy-trigger", daemon=True).start()


ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


@pytest.fixture
def s3_proxy(s3_server: S3Server) -> Iterator[S3Proxy]:
    """A fault proxy in front of the session S3 server; AWS_ENDPOINT_URL points at it meanwhile."""
    if not s3_server.running:  # a fault test left it stopped
        s3_server.start()
    proxy = S3Proxy(s3_server.endpoint_url)
    proxy.start()
    saved = {name: os.environ.get(name) for name in ENDPOINT_VARIABLES}
    os.environ["AWS_ENDPOINT_URL"] = proxy.endpoint_url
    os.environ.pop("AWS_ENDPOINT_URL_S3", None)  # it would win over AWS_ENDPOINT_URL
    # fsspec caches filesystems by their arguments: an earlier proxy on a recycled port would
    # hand back its client, with another test's retry settings (AWS_MAX_ATTEMPTS) and pool.
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield proxy
    finally:
        proxy.close()
        s3fs.S3FileSystem.clear_instance_cache()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
