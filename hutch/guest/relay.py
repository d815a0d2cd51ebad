"""The box's way out: an HTTP proxy address (127.0.0.1:3128) that relays each connection, byte
for byte, to the host's egress proxy on the channel directory's egress socket.

The relay decides nothing: the box has no network card, and the host proxy applies the rules to
whatever arrives, so a program that skips the relay has nowhere to go, and one that fools it
gains nothing. Standard library only.

A pause closes every connection to the host (gVisor cannot checkpoint them) and holds new ones
until the box is woken.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time

try:
    from hutch.guest import protocol as p
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import protocol as p  # type: ignore[import-not-found, no-redef]

CHUNK = 64 * 1024
UNAVAILABLE = (b"HTTP/1.1 502 Bad Gateway\r\nX-Hutch-Egress: unavailable\r\nContent-Type: text/plain\r\n"
               b"Content-Length: 38\r\nConnection: close\r\n\r\nhutch egress: this box has no way out\n")


class Relay:
    def __init__(self, port: int = p.PROXY_PORT, host_socket: str = f"{p.CHANNEL_DIR}/{p.EGRESS_SOCKET}") -> None:
        self.port, self.host_socket = port, host_socket
        self._cond = threading.Condition()
        self._open = True  # False while the box is being paused
        self._to_host: set[socket.socket] = set()

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        with self._cond:
            while not self._open:
                self._cond.wait()
            host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._to_host.add(host)
        try:
            try:
                host.connect(self.host_socket)
            except OSError:
                with contextlib.suppress(OSError):
                    conn.sendall(UNAVAILABLE)
                return
            outward = threading.Thread(target=pipe, args=(conn, host), daemon=True)
            outward.start()
            pipe(host, conn)
            outward.join()
        finally:
            host.close()
            conn.close()
            with self._cond:
                self._to_host.discard(host)
                self._cond.notify_all()

    def quiesce(self, wait: float = 5.0) -> None:
        """Cut every connection to the host, hold new ones, and wait (a while) for each owner to
        close its socket: none may be left at the checkpoint. Closing is left to the owners, so no
        descriptor number is freed under a thread that still uses it."""
        deadline = time.monotonic() + wait
        with self._cond:
            self._open = False
            for host in self._to_host:
                with contextlib.suppress(OSError):
                    host.shutdown(socket.SHUT_RDWR)
            while self._to_host and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)

    def wake(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()


def pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy until the source ends, then end the destination's sending side."""
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
