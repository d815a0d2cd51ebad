"""The exec route: run a command to its end, its output streamed as NDJSON events.

Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

try:
    from hutch.guest import launch as L
    from hutch.guest import protocol as p
    from hutch.guest.exchange import EventStream, Exchange
    from hutch.guest.spawner import Spawner
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import launch as L  # type: ignore[import-not-found, no-redef]
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from exchange import EventStream, Exchange  # type: ignore[import-not-found, no-redef]
    from spawner import Spawner  # type: ignore[import-not-found, no-redef]


def command_request(ex: Exchange) -> dict[str, Any]:
    """The body of an exec or spawn: a JSON object with a string `cmd` (else refused)."""
    try:
        req = json.loads(b"".join(ex.body()))
        if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
            raise ValueError("a JSON object with a string cmd is needed")
    except ValueError as e:
        raise p.Refusal(p.ERR_BAD_REQUEST, f"bad command request: {e}") from None
    return req


def run(ex: Exchange, spawner: Spawner) -> None:
    """Start, exit and the output between as events. A command that cannot start is an error
    event, not an error answer: the stream has begun by then."""
    req = command_request(ex)
    as_root = req.get("user") == "root"
    env, home = L.command_env(as_root, req.get("env"))
    cwd = req.get("cwd") or (home if os.path.isdir(home) else "/")
    stream = EventStream(ex)
    try:
        launched = L.launch(spawner, ["/bin/sh", "-c", req["cmd"]], cwd, env, as_root)
    except OSError as e:
        problem = L.start_problem(e, cwd)
        stream.send({"t": p.EVENT_ERROR, "code": problem.code, "message": problem.message})
        stream.close()
        return
    stream.send({"t": p.EVENT_START, "pid": launched.pid})
    exit_code, timed_out = L.pump(launched, stream, req.get("timeout"))
    stream.send({"t": p.EVENT_EXIT, "code": None if timed_out else exit_code, "timed_out": timed_out})
    stream.close()
