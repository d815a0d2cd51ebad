"""The routes about the channel itself: health, quiesce (every host socket closed before a
checkpoint) and tunnel (the connection becomes bytes to a port in the box, for preview URLs).

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

try:
    from hutch.guest import launch as L
    from hutch.guest import protocol as p
    from hutch.guest.exchange import Exchange
    from hutch.guest.listener import stop_serving
    from hutch.guest.relay import pipe
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import launch as L  # type: ignore[import-not-found, no-redef]
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from exchange import Exchange  # type: ignore[import-not-found, no-redef]
    from listener import stop_serving  # type: ignore[import-not-found, no-redef]
    from relay import pipe  # type: ignore[import-not-found, no-redef]

TUNNEL_GRACE = 30.0  # after the host ends a tunnel, how long the box's server may still answer


def health(ex: Exchange) -> None:
    ex.answer_json({"version": p.VERSION, "pid": os.getpid()})


def quiesce(ex: Exchange) -> None:
    """Answer, then stop listening; channel.serve closes every connection once the loop ends."""
    ex.answer_json({"quiescing": True})
    ex.close_connection = True
    threading.Thread(target=stop_serving, args=(ex.server,), daemon=True).start()


def tunnel(ex: Exchange) -> None:
    """Connect to 127.0.0.1:port in the box and relay bytes both ways for the rest of this
    connection. The host sends nothing after its request until it has the answer's head, so
    nothing of the tunnel's bytes sits in the request buffer. A pause ends it (close_all)."""
    port = ex.query().get("port", "")
    if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise p.Refusal(p.ERR_BAD_REQUEST, "port must be 1-65535")
    try:
        target = socket.create_connection(("127.0.0.1", int(port)), timeout=5)
    except OSError as e:
        raise p.Refusal(p.ERR_PORT_CLOSED, f"nothing listens on port {port} in the box: {e.strerror or e}") from None
    target.settimeout(None)
    ex.close_connection = True
    ex.send_response(200)
    ex.send_header("Content-Type", "application/octet-stream")
    ex.end_headers()
    ex.wfile.flush()
    outward = threading.Thread(target=pipe, args=(target, ex.connection), daemon=True)
    outward.start()
    try:
        while data := ex.rfile.read1(L.CHUNK):
            target.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)
    outward.join(TUNNEL_GRACE)  # the box's server may still be answering
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_RDWR)  # one that neither answers nor closes holds nothing for ever
    outward.join()
    target.close()
