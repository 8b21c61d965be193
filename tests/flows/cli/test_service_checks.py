"""flows.cli.service_checks: a PREFECT_API_URL where no Prefect API answers is named in seconds, against real sockets."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from bench.lib.s3_server import free_port
from flows.cli.service_checks import PrefectApiUnreachable, check_prefect_api


class _Answer(http.server.BaseHTTPRequestHandler):
    """What answers at a PREFECT_API_URL that is not a Prefect API: the status and body the path says."""

    def do_GET(self) -> None:
        status, body = {"/404/health": (404, b"no"), "/page/health": (200, b"<html>"), "/cloud/health": (401, b"")}[
            self.path
        ]
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a real HTTP server answering as :class:`_Answer` says."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_prefect_api_url_where_no_prefect_api_answers_is_named(http_server: str) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts connections, never answers
    nobody = f"http://127.0.0.1:{free_port()}/api"
    cases = {
        nobody: "nothing answers there (Connection refused); start that server, or unset PREFECT_API_URL",
        f"http://127.0.0.1:{silent.getsockname()[1]}/api": "nothing answers there (no answer within 0.5 s)",
        f"{http_server}/404": "something answers there, but not a Prefect API (GET /health: HTTP 404); a Prefect "
        "server's API URL ends in /api, like http://127.0.0.1:4200/api; unset PREFECT_API_URL",
        f"{http_server}/page": "something answers there, but not a Prefect API (GET /health: answer b'<html>')",
        "localhost:4200/api": "not an http(s) URL with a host; a Prefect server's is like http://127.0.0.1:4200/api",
    }
    with silent:
        for url, words in cases.items():
            with pytest.raises(PrefectApiUnreachable) as caught:
                check_prefect_api(url, timeout=0.5)
            assert str(caught.value).startswith(f"PREFECT_API_URL={url}: {words}"), str(caught.value)
    with pytest.raises(PrefectApiUnreachable, match=r"start that server, or point it elsewhere$"):
        check_prefect_api(nobody, otherwise="point it elsewhere")
    check_prefect_api(f"{http_server}/cloud")  # Prefect Cloud without a key: its client says more
    check_prefect_api(None)  # unset: the embedded server is used
