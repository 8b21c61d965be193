"""The embedded Prefect API server of a local run: ``pbg train``/``pbg eval`` without PREFECT_API_URL.

Prefect's own ephemeral mode starts a temporary server the first time the client needs one,
that is after every import and right before the flow run: about 3 s of the server's imports
on the critical path of every command. This module starts the same server (Prefect's app, see
:mod:`flows.prefect_host.local_server_app`) as the command's first step instead, so its start overlaps our
imports, the config checks and the data loading, and it runs it the way a local run needs:

- **Services of a local run only** (:data:`SERVER_SETTINGS`): no telemetry, no automations
  (triggers, actions), no live event stream (no UI), no stored events (``PBG_KEEP_EVENTS=1``
  keeps them); the task-run recorder (and the event persister, when kept) write in batches at
  most every :data:`FLUSH_SECONDS` instead of one SQLite transaction per event. Per event they
  cost about 0.3 s of server CPU per training iteration and held SQLite's write lock so often
  that the flow's own requests kept colliding with them.
- **Busy writes replayed in the server** (see :mod:`flows.prefect_host.local_server_app`): a collision with
  SQLite's write lock costs milliseconds, not the client's 2 s back-off (or a failed run).
- **Bound to this command:** it listens on a socket we bind to 127.0.0.1 before it starts
  (no port race, the URL is known at once), it is in its own session so a terminal Ctrl-C
  reaches only the command (which then ends the flow run cleanly and stops the server), and
  the kernel stops it if the command dies (``PR_SET_PDEATHSIG``), even on ``kill -9``. A
  server stopped before it has started (Prefect's migrations of a new PREFECT_HOME take
  30 s or more) exits at once instead of finishing them first (see
  :mod:`flows.prefect_host.local_server_app`); SQLite rolls back the migration it was in.
- **A one-root CA file for its clients:** Prefect builds a TLS context for every API client it
  creates (one per subflow), ~20 ms of CPU each to parse certifi's ~150 roots, even for this
  plain-HTTP loopback URL. ``PREFECT_API_SSL_CERT_FILE`` (unless set) names a file holding the
  first root of that same bundle (:func:`loopback_ca_file`): ~0.7 ms, and if a TLS connection
  were ever made it would trust a subset of what it trusted before, never something else.
- **Stopped with its queues drained:** :func:`local_api` first sends what the command's Prefect
  client still holds, then :meth:`LocalApiServer.stop` sends SIGTERM and the server's services
  flush what they hold before it exits, so every task run, event and log line of the run is in
  ``$PREFECT_HOME/prefect.db`` for a later ``prefect server start``.

Nothing here imports Prefect: the point is to start the server before anything heavy.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from pbg_core.errors import PbgError

FLUSH_SECONDS = 1
SERVER_SETTINGS = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_ACTIONS_ENABLED": "false",
    "PREFECT_SERVER_EVENTS_STREAM_OUT_ENABLED": "false",  # live events for UI pages: no UI here
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "1000",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": str(FLUSH_SECONDS),
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_BATCH_SIZE": "1000",
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL": str(FLUSH_SECONDS),
    "PREFECT_UI_ENABLED": "false",
    # No browser talks to it (CSRF guards a UI's session); the client is told so (local_api).
    "PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED": "false",
    # Storing every event (a task run sends three) cost ~0.1 s of server CPU per training
    # iteration, about a third of a small graph's run; task runs, flow runs, logs and
    # artifacts are recorded without it. ``PBG_KEEP_EVENTS=1`` stores them (see server_settings).
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false",
}
KEEP_EVENTS_VARIABLE = "PBG_KEEP_EVENTS"
CA_FILE_VARIABLE = "PREFECT_API_SSL_CERT_FILE"
_CA_FILE: BinaryIO | None = None  # see loopback_ca_file
# A brand-new PREFECT_HOME runs Prefect's database migrations first (30 s or more here).
READY_TIMEOUT_SECONDS = 180.0
STOP_TIMEOUT_SECONDS = 15.0
DRAIN_TIMEOUT_SECONDS = 10.0
# After an interrupt the command must end within ~5 s of the signal: it waits this long for
# the client's queues and then for the server's flush (about 0.2 s each on a small run).
INTERRUPTED_DRAIN_SECONDS = 1.5
INTERRUPTED_STOP_SECONDS = 2.0
_PR_SET_PDEATHSIG = 1


class LocalServerError(PbgError):
    """The embedded Prefect API server did not start or answer."""


@dataclass
class LocalApiServer:
    """A running embedded server: its process, API URL and log file."""

    process: subprocess.Popen[bytes]
    api_url: str
    log: BinaryIO  # the server's output, in an already-unlinked file: nothing is left behind
    started_at: float = field(default_factory=time.monotonic)
    ready: bool = False

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> float:
        """Block until ``/api/health`` answers; returns the seconds waited.

        Raises:
            LocalServerError: the server exited, or did not answer within ``timeout`` s.
        """
        waited_from = time.monotonic()
        deadline = waited_from + timeout
        while not self.ready:
            if self.process.poll() is not None:
                raise LocalServerError(self._failure(f"exited with status {self.process.returncode}"))
            if time.monotonic() > deadline:
                raise LocalServerError(self._failure(f"did not answer within {timeout:.0f} s"))
            self.ready = _healthy(self.api_url)
            if not self.ready:
                time.sleep(0.02)
        return time.monotonic() - waited_from

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
        """SIGTERM, wait for the services to flush and the process to exit (SIGKILL after ``timeout``)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def log_tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines the server printed."""
        self.log.seek(0)
        return "\n".join(self.log.read().decode(errors="replace").splitlines()[-lines:])

    def _failure(self, what: str) -> str:
        tail = self.log_tail()
        return (
            f"the local Prefect API server of this run ({self.api_url}) {what}; to use a running "
            "Prefect server instead, set PREFECT_API_URL" + (f"\nits last lines:\n{tail}" if tail else "")
        )


def server_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """:data:`SERVER_SETTINGS`, with the event persister kept when ``PBG_KEEP_EVENTS`` is 1/true/yes."""
    settings = dict(SERVER_SETTINGS)
    if environ.get(KEEP_EVENTS_VARIABLE, "").strip().lower() in ("1", "true", "yes"):
        del settings["PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED"]
    return settings


def start_local_server(
    python: str = sys.executable, module: str = "flows.prefect_host.local_server_app"
) -> LocalApiServer:
    """Start the embedded server in the background on a free loopback port; returns at once.

    Call it before anything else in the command: its start-up (about 3 s of imports) then
    overlaps the command's own work. Call :meth:`LocalApiServer.wait_ready` before the flow.
    ``python -m module FD`` is the server's command line (see :mod:`flows.prefect_host.local_server_app`).
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    kept = os.environ.get("PBG_SERVER_LOG")  # to read what the server printed, after the run
    log = open(kept, "w+b") if kept else tempfile.TemporaryFile(prefix="pbg-prefect-server-")  # noqa: SIM115 - the server log outlives this function: handed to the LocalApiServer returned below
    env = {**os.environ, **server_settings(os.environ)}
    env.pop("PREFECT_API_URL", None)  # the server must not act as a client of another server
    with listener:
        process = subprocess.Popen(
            [python, "-m", module, str(listener.fileno())],
            pass_fds=(listener.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    return LocalApiServer(process=process, api_url=f"http://127.0.0.1:{port}/api", log=log)


@contextlib.contextmanager
def local_api(enabled: bool | None = None):  # type: ignore[no-untyped-def]  # a contextlib.contextmanager generator; its return type is declared by the decorator
    """Start the embedded server and point this process's Prefect client at it.

    Yields the :class:`LocalApiServer`, or None when ``PREFECT_API_URL`` already names a server
    (``enabled`` overrides that test). Sets ``PREFECT_API_URL`` in ``os.environ`` (enter this
    before Prefect reads its settings) and leaves it set: a Prefect client created after the
    server stopped would otherwise start Prefect's own temporary server, which would outlive
    this command. ``PREFECT_CLIENT_MAX_RETRIES=0`` (unless set): the server replays busy writes
    itself, and a loopback server that refuses connections is gone for good, so the client's
    back-off (2 s doubling, five times) would only delay the end, or the exit, by a minute.
    ``PREFECT_CLIENT_CSRF_SUPPORT_ENABLED=false``: the server takes no CSRF token.
    The server is stopped (the client's queues sent first, its own drained) on exit.
    """
    if enabled is None:
        enabled = not os.environ.get("PREFECT_API_URL")
    if not enabled:
        yield None
        return
    server = start_local_server()
    os.environ["PREFECT_API_URL"] = server.api_url
    os.environ.setdefault("PREFECT_CLIENT_MAX_RETRIES", "0")
    # The server takes no CSRF token (SERVER_SETTINGS): else each new API client, one per
    # iteration subflow, first asks it for one.
    os.environ["PREFECT_CLIENT_CSRF_SUPPORT_ENABLED"] = "false"
    if not os.environ.get(CA_FILE_VARIABLE):
        ca_file = loopback_ca_file()
        if ca_file is not None:
            os.environ[CA_FILE_VARIABLE] = ca_file
    interrupted = False
    try:
        yield server
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        # Whatever happened, send what the client holds first (nothing, if it never answered).
        # After Ctrl-C the user waits: seconds, not the usual minute of patience.
        if server.ready and "prefect" in sys.modules:
            drain_prefect_clients(INTERRUPTED_DRAIN_SECONDS if interrupted else DRAIN_TIMEOUT_SECONDS)
        server.stop(INTERRUPTED_STOP_SECONDS if interrupted else STOP_TIMEOUT_SECONDS)


def loopback_ca_file() -> str | None:
    """A path to a PEM file holding the first certificate of certifi's bundle, for Prefect's client.

    The file is an unlinked temporary file kept open for the life of the process, named by its
    ``/proc/self/fd`` path: nothing is left on disk, even after ``kill -9``. None where that path
    does not exist (not Linux) or certifi has no certificate: Prefect then uses its default.
    """
    global _CA_FILE
    if _CA_FILE is None:
        try:
            import certifi

            with open(certifi.where(), "rb") as bundle:
                match = re.search(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n", bundle.read(), re.S)
        except (ImportError, OSError):
            return None
        if match is None:
            return None
        # Kept open for the process's life: the /proc/self/fd path below names it.
        _CA_FILE = tempfile.TemporaryFile(prefix="pbg-loopback-ca-")  # noqa: SIM115 - see above
        _CA_FILE.write(match.group(0))
        _CA_FILE.flush()
    path = f"/proc/self/fd/{_CA_FILE.fileno()}"
    return path if os.path.exists(path) else None


def drain_prefect_clients(timeout: float = DRAIN_TIMEOUT_SECONDS) -> None:
    """Send the events and log lines Prefect's client still holds, for at most ``timeout`` s.

    Before the server stops: afterwards Prefect's own exit handlers would retry them against
    a closed port for about a minute (its back-off doubles from 2 s, five times).
    """
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    EventsWorker.drain_all(timeout=timeout)
    APILogWorker.drain_all(timeout=timeout)


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _die_with_parent() -> None:  # runs in the child between fork and exec
    """Ask the kernel to SIGTERM the server when the command's process dies (Linux only)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
