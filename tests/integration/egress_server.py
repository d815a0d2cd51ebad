"""A stand-in for "the internet", run inside a network namespace the tests make: plain HTTP on
port 80 and HTTPS on 443 (a self-signed certificate for the test names). Each answer says what
the server saw: the Host header, the path and, over TLS, the server name. Every request's headers
also go, as a JSON line, to SEEN_LOG, which only the tests on the host read: an answer never
echoes a header's value, so a credential that arrives here never travels back into a box.

    python3 egress_server.py CERT KEY SEEN_LOG [FILES_DIR]

GET /files/NAME serves FILES_DIR/NAME (a package a template build installs, say).
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEEN_LOG = ""
FILES_DIR = ""
_seen_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real APIs

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok and SEEN_LOG:
            headers = {k.lower(): v for k, v in self.headers.items()}
            line = json.dumps({"method": self.command, "path": self.path, "headers": headers,
                               "tls": isinstance(self.connection, ssl.SSLSocket)})
            with _seen_lock, open(SEEN_LOG, "a") as f:
                f.write(line + "\n")
        return ok

    def do_GET(self) -> None:
        if self.path.startswith("/files/") and FILES_DIR:
            name = self.path.removeprefix("/files/")
            path = os.path.join(FILES_DIR, name)
            if "/" in name or not os.path.isfile(path):
                self.send_error(404)
                return
            with open(path, "rb") as f:
                self._send(f.read(), "application/octet-stream")
            return
        if self.path.startswith("/big/"):
            size = int(self.path.split("/")[2])
            self._send(b"x" * size, "application/octet-stream")
            return
        sni = getattr(self.connection, "sni", None)
        body = json.dumps({"host": self.headers.get("Host"), "path": self.path, "sni": sni,
                           "tls": isinstance(self.connection, ssl.SSLSocket)}).encode()
        self._send(body, "application/json")

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(json.dumps({"received": len(data)}).encode(), "application/json")

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def main() -> None:
    global SEEN_LOG, FILES_DIR
    cert, key = sys.argv[1], sys.argv[2]
    SEEN_LOG = sys.argv[3] if len(sys.argv) > 3 else ""
    FILES_DIR = sys.argv[4] if len(sys.argv) > 4 else ""
    plain = ThreadingHTTPServer(("0.0.0.0", 80), Handler)
    secure = ThreadingHTTPServer(("0.0.0.0", 443), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    def remember_sni(sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, _ctx: ssl.SSLContext) -> None:
        sock.sni = name  # type: ignore[union-attr]

    ctx.sni_callback = remember_sni
    secure.socket = ctx.wrap_socket(secure.socket, server_side=True)
    threading.Thread(target=secure.serve_forever, daemon=True).start()
    print("ready", flush=True)
    plain.serve_forever()


if __name__ == "__main__":
    main()
