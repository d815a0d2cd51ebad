"""A stand-in for "the internet", run inside a network namespace the tests make: plain HTTP on
port 80 and HTTPS on 443 (a self-signed certificate for example.test and *.example.test). Each
answer says what the server saw: the Host header, the path and, over TLS, the server name.

    python3 egress_server.py CERT KEY
"""

from __future__ import annotations

import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
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
    cert, key = sys.argv[1], sys.argv[2]
    plain = ThreadingHTTPServer(("0.0.0.0", 80), Handler)
    secure = ThreadingHTTPServer(("0.0.0.0", 443), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    def remember_sni(sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, _ctx: ssl.SSLContext) -> None:
        sock.sni = name  # type: ignore[union-attr]

    ctx.sni_callback = remember_sni  # type: ignore[assignment]
    secure.socket = ctx.wrap_socket(secure.socket, server_side=True)
    threading.Thread(target=secure.serve_forever, daemon=True).start()
    print("ready", flush=True)
    plain.serve_forever()


if __name__ == "__main__":
    main()
