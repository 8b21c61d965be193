"""The HTTP side of the fault proxy of :mod:`s3_proxy`: relaying one request to the S3 server and back.

:class:`RelayServer` accepts client connections for a proxy (anything with the methods of
:class:`ProxyControl`, i.e. :class:`s3_proxy.S3Proxy`), and :class:`RelayHandler` forwards each
request (method, path, query, headers, body streamed as it came, ``Content-Length`` or chunked
framing kept) to the upstream server and the answer back, or answers it with the S3 error the
proxy drew (``503 SlowDown`` ..., with a proper XML body). :func:`cut` and :func:`reset` end a
client connection the two ways an outage does (EOF, TCP RST).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

BLOCK = 1 << 16
UPSTREAM_TIMEOUT_S = 60.0
# Per RFC 7230 these describe one connection, not the message: never forwarded.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect"}
)
MESSAGES = {
    "SlowDown": "Please reduce your request rate.",
    "InternalError": "We encountered an internal error. Please try again.",
    "ServiceUnavailable": "Service is unable to handle request.",
}


class ProxyControl(Protocol):
    """What the relay asks of its proxy (:class:`s3_proxy.S3Proxy`)."""

    upstream: tuple[str, int]

    def register(self, conn: socket.socket, add: bool) -> None: ...

    def accepts(self, conn: socket.socket) -> bool: ...

    def draw_fault(self, method: str, path: str) -> tuple[int, str] | None: ...

    def forwarded(self) -> None: ...

    def answered(self, method: str, path: str, status: int) -> None: ...


def cut(conn: socket.socket) -> None:
    """Close a client connection at once (its handler thread then sees EOF or an error)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


def reset(conn: socket.socket) -> None:
    """Abort a fresh connection: with a zero linger time, closing it sends a TCP RST."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()


class RelayServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64
    proxy: ProxyControl

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """Reset a new connection during a reset outage (before any handler holds it open)."""
        return self.proxy.accepts(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: cut connections and vanished clients are what fault tests are about."""


class RelayHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like S3
    server: RelayServer

    def setup(self) -> None:
        super().setup()
        self.upstream: http.client.HTTPConnection | None = None
        self.server.proxy.register(self.connection, True)

    def finish(self) -> None:
        self.server.proxy.register(self.connection, False)
        if self.upstream is not None:
            self.upstream.close()
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's signature
        """Quiet (moto keeps the request log)."""

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (OSError, http.client.HTTPException):
            self.close_connection = True

    def do_any(self) -> None:
        """Forward one request, or answer it with an injected fault."""
        proxy = self.server.proxy
        path = urlsplit(self.path).path
        body = _request_body(self)
        fault = proxy.draw_fault(self.command, path)
        if fault is not None:
            for _ in body:  # keep the connection in step: the client sent a body
                pass
            self._send_fault(*fault, path)
            return
        status = self._forward(body)
        proxy.answered(self.command, path, status)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_any

    def _forward(self, body: Iterator[bytes]) -> int:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        if chunked:
            headers["Transfer-Encoding"] = "chunked"
        if self.upstream is None:
            self.upstream = http.client.HTTPConnection(*self.server.proxy.upstream, timeout=UPSTREAM_TIMEOUT_S)
        conn = self.upstream
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            for block in body:
                conn.send(block)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException):
            conn.close()
            self.upstream = None
            raise
        self.server.proxy.forwarded()  # before the client can have it: its counters already show it
        self._relay(response)
        return response.status

    def _relay(self, response: http.client.HTTPResponse) -> None:
        self.send_response_only(response.status, response.reason)
        length = response.getheader("Content-Length")
        for name, value in response.getheaders():
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        # A body of unknown length (chunked from upstream) goes back chunked.
        chunked = length is None and self.command != "HEAD" and response.status not in (204, 304)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while block := response.read(BLOCK):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if response.will_close:
            self.upstream.close()
            self.upstream = None

    def _send_fault(self, status: int, code: str, path: str) -> None:
        request_id = uuid.uuid4().hex[:16].upper()
        body = (
            b""
            if self.command == "HEAD"
            else (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{escape(code)}</Code><Message>{escape(MESSAGES.get(code, code))}</Message>"
                f"<Resource>{escape(path)}</Resource><RequestId>{request_id}</RequestId></Error>"
            ).encode()
        )
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", request_id)
        self.send_header("Date", self.date_time_string())
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()


def _request_body(handler: BaseHTTPRequestHandler) -> Iterator[bytes]:
    """The request body as it came on the wire, in blocks (chunked framing kept as is)."""
    if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
        return _raw_chunks(handler.rfile)
    length = int(handler.headers.get("Content-Length") or 0)
    return _fixed(handler.rfile, length)


def _fixed(rfile: Any, length: int) -> Iterator[bytes]:
    remaining = length
    while remaining > 0:
        block = rfile.read(min(BLOCK, remaining))
        if not block:
            raise ConnectionResetError(f"client closed the connection {remaining} bytes before the body's end")
        remaining -= len(block)
        yield block


def _raw_chunks(rfile: Any) -> Iterator[bytes]:
    """A chunked body's bytes, framing included, up to and including its trailer section."""
    while True:
        size_line = rfile.readline(1024)
        if not size_line:
            raise ConnectionResetError("client closed the connection inside a chunked body")
        yield size_line
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            break
        yield from _fixed(rfile, size + 2)  # data and its CRLF
    while True:  # trailers, then the empty line
        line = rfile.readline(8192)
        if not line:
            raise ConnectionResetError("client closed the connection inside a chunked trailer")
        yield line
        if line in (b"\r\n", b"\n"):
            return
