"""The channel's listener: it keeps every connection it accepted so a pause can close them all, and
stops its accept loop at once when asked (a quiesce).

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import threading
from typing import Any


class ChannelServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The listener, and every connection it accepted, so a pause can close them all: gVisor
    cannot checkpoint a socket that is bound to, or connected through, a host path."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, path: str, handler: type[socketserver.BaseRequestHandler]) -> None:
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()
        super().__init__(path, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_all(self) -> None:
        self.server_close()
        with self.lock:
            for conn in self.connections:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                # close() would leave the fd open while a handler's file objects hold the socket:
                # detach and close the fd itself, so no host socket is left to checkpoint
                with contextlib.suppress(OSError):
                    os.close(conn.detach())
            self.connections.clear()


def stop_serving(server: socketserver.BaseServer) -> None:
    """End the accept loop at once: shutdown() only takes effect when the loop wakes, so wake it
    with a connection of our own, again until it has stopped (a wake-up that came before the
    shutdown's flag was set only serves that connection). Called off the main thread, which runs
    the loop."""
    stopper = threading.Thread(target=server.shutdown, daemon=True)
    stopper.start()
    while stopper.is_alive():
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as s:
            s.connect(server.server_address)
        stopper.join(0.05)
