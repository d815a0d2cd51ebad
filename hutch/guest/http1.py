"""Just enough HTTP/1.1 for the channel: request parsing, keep-alive, and response writing.

The standard library's http.server would do, but importing it (email, http.client, ssl, ...) costs
~130 ms of every box's boot under gVisor; this costs almost nothing. Standard library only.
"""

from __future__ import annotations

import json
import os
import socketserver
import sys
from collections.abc import Iterator
from typing import ClassVar

try:
    from hutch.guest import protocol as p
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import protocol as p  # type: ignore[import-not-found, no-redef]

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}
MAX_LINE = 65536
MAX_HEADERS = 100
CHUNK = 256 * 1024


class BadRequest(Exception):
    pass


class Handler(socketserver.StreamRequestHandler):
    """Calls `do_<METHOD>()` for each request on a connection, with `command`, `path` and
    `headers` (names in lower case) set. The handler reads the body itself (or not: a body left
    unread ends the connection after the answer)."""

    server_version: ClassVar[str] = "hutch-agent"
    command = ""
    path = ""
    headers: dict[str, str]
    close_connection = False
    _body_left = False  # the request has a body not yet read to its end
    _head_sent = False
    _body: Iterator[bytes] | None = None  # this request's body reader, once asked for

    def handle(self) -> None:
        while not self.close_connection:
            try:
                if not self._read_head():
                    return
            except (BadRequest, ValueError, UnicodeDecodeError):
                self.close_connection = True
                self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            method = getattr(self, f"do_{self.command}", None)
            if method is None:
                self.close_connection = True
                self.send_response(405)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._body_left = self.headers.get("content-length", "0") != "0" or "transfer-encoding" in self.headers
            self._head_sent = False
            self._body = None
            try:
                method()
            except (ConnectionError, BrokenPipeError):
                return
            except Exception as e:  # a bug must answer 500, not leave the host guessing
                self.close_connection = True
                if not self._head_sent:
                    body = json.dumps({"code": p.ERR_AGENT, "message": type(e).__name__}).encode()
                    self.send_response(p.ERROR_STATUS[p.ERR_AGENT])
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                return
            if self._body_left or self.headers.get("connection", "").lower() == "close":
                self.close_connection = True  # an unread body would be taken for the next request

    def _read_head(self) -> bool:
        line = self.rfile.readline(MAX_LINE + 1)
        if not line:
            return False
        if len(line) > MAX_LINE:
            raise BadRequest("request line too long")
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise BadRequest("bad request line")
        self.command, self.path = parts[0], parts[1]
        self.headers = {}
        for _ in range(MAX_HEADERS):
            h = self.rfile.readline(MAX_LINE + 1)
            if h in (b"\r\n", b"\n", b""):
                return True
            name, sep, value = h.decode("latin-1").partition(":")
            if not sep:
                raise BadRequest("bad header")
            self.headers[name.strip().lower()] = value.strip()
        raise BadRequest("too many headers")

    def body(self) -> Iterator[bytes]:
        """The request body in pieces, from Content-Length or chunked transfer encoding. One
        reader per request: a handler that stops midway (a full disk) and answers goes on from
        where it stopped when the rest is discarded, not from the body's start."""
        if self._body is None:
            self._body = self._read_body()
        return self._body

    def _read_body(self) -> Iterator[bytes]:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline(MAX_LINE).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(MAX_LINE) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                yield from self._exactly(size)
                self.rfile.readline(MAX_LINE)
        else:
            yield from self._exactly(int(self.headers.get("content-length") or 0))
        self._body_left = False

    def discard_body(self) -> None:
        try:
            for _ in self.body() if self._body_left else ():
                pass
        except ConnectionError:
            self.close_connection = True

    def _exactly(self, size: int) -> Iterator[bytes]:
        while size:
            data = self.rfile.read(min(size, CHUNK))
            if not data:
                raise ConnectionError("the body ended early")
            size -= len(data)
            yield data

    def send_response(self, status: int) -> None:
        self._head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}", f"Server: {self.server_version}"]

    def send_header(self, name: str, value: str) -> None:
        self._head.append(f"{name}: {value}")

    def end_headers(self) -> None:
        if self.close_connection:
            self._head.append("Connection: close")
        self.wfile.write(("\r\n".join(self._head) + "\r\n\r\n").encode("latin-1"))
        self._head_sent = True
