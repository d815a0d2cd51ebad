"""One request and its answer on the channel: the query, JSON and chunked answers, error answers by
code, and NDJSON event streams. What every route of the agent writes with; no route lives here.

Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any
from urllib.parse import parse_qs, urlsplit

try:
    from hutch.guest import http1
    from hutch.guest import protocol as p
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import http1  # type: ignore[import-not-found, no-redef]
    import protocol as p  # type: ignore[import-not-found, no-redef]


class Exchange(http1.Handler):
    """The request's parts and the ways to answer it."""

    server_version = f"hutch-agent/{p.VERSION}"

    def route(self) -> str:
        return urlsplit(self.path).path

    def query(self) -> dict[str, str]:
        return {k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()}

    def path_arg(self) -> str:
        """The query's `path`, an absolute box path (else refused)."""
        path = self.query().get("path", "")
        problem = p.path_problem(path)
        if problem:
            raise p.Refusal(p.ERR_BAD_PATH, problem)
        return path

    def json_body(self) -> dict[str, Any]:
        """The request's body, a JSON object (else ValueError)."""
        req = json.loads(b"".join(self.body()))
        if not isinstance(req, dict):
            raise ValueError("a JSON object is needed")
        return req

    def answer_json(self, body: dict[str, Any]) -> None:
        self._send_json(200, body)

    def refuse(self, code: str, message: str) -> None:
        """Answer an error: its status is the code's (protocol.ERROR_STATUS)."""
        self.discard_body()  # the host is still sending it, and waits to finish before it reads
        self._send_json(p.ERROR_STATUS[code], {"code": code, "message": message})

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")


class EventStream:
    """NDJSON events to the host, as the answer (made opens it); a host that went away stops the
    writes, not the command."""

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.alive = True
        ex.start_chunked("application/x-ndjson")

    def send(self, event: dict[str, Any]) -> None:
        if not self.alive:
            return
        try:
            self.ex.chunk(json.dumps(event).encode() + b"\n")
            self.ex.wfile.flush()
        except OSError:
            self.alive = False
            self.ex.close_connection = True

    def close(self) -> None:
        if self.alive:
            try:
                self.ex.end_chunked()
            except OSError:
                self.ex.close_connection = True
