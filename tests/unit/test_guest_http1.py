"""The agent's HTTP/1.1 layer on a real socket pair: a handler that stops reading a body midway
(a full disk) and answers has the rest discarded from where it stopped, so its answer reaches
the host and the connection serves the next request."""

from __future__ import annotations

import socket
import threading

import pytest

from hutch.guest.http1 import Handler

PIECE = 256 * 1024  # the layer's own read size: a body of several pieces


class StopsMidway(Handler):
    """PUT reads one piece of the body, then answers 400 after discarding the rest."""

    def do_PUT(self) -> None:
        next(iter(self.body()))
        self.discard_body()
        self.send_response(400)
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"full")

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class Answers:
    """The agent's answers on the host's end, one at a time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.data = sock, b""

    def next(self) -> bytes:
        """The status line and the body of the next answer."""
        while b"\r\n\r\n" not in self.data:
            self.data += self.sock.recv(65536)
        head, _, self.data = self.data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(self.data) < length:
            self.data += self.sock.recv(65536)
        body, self.data = self.data[:length], self.data[length:]
        return head.split(b"\r\n")[0] + b" " + body


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_left_midway_is_discarded_from_where_it_stopped(chunked: bool) -> None:
    host, agent = socket.socketpair()
    serving = threading.Thread(target=StopsMidway, args=(agent, "", None), daemon=True)
    serving.start()
    body = b"x" * (5 * PIECE + 17)
    if chunked:
        framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[i:i + 100_000] for i in range(0, len(body), 100_000)))
        head = b"PUT /f HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        sent = head + framed + b"0\r\n\r\n"
    else:
        sent = b"PUT /f HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    writer = threading.Thread(target=host.sendall, args=(sent + b"GET /next HTTP/1.1\r\n\r\n",))
    writer.start()
    try:
        host.settimeout(10)
        answers = Answers(host)
        assert answers.next() == b"HTTP/1.1 400 Bad Request full"
        assert answers.next() == b"HTTP/1.1 200 OK ok"  # the same connection, the body's rest not taken for a request
    finally:
        writer.join(10)
        host.close()
        serving.join(10)
