"""The spawned processes' routes: start one, list the running, and /procs/{pid}/...: describe,
follow its events, write or close its stdin, signal it, resize its terminal.

Standard library only.
"""

from __future__ import annotations

import json
import os
import sys

try:
    from hutch.guest import launch as L
    from hutch.guest import protocol as p
    from hutch.guest.exchange import EventStream, Exchange
    from hutch.guest.procs import Proc, ProcTable, parse_resize, parse_signal
    from hutch.guest.routes_exec import command_request
except ImportError:  # in the box: run as a script beside its modules, without the hutch package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import launch as L  # type: ignore[import-not-found, no-redef]
    import protocol as p  # type: ignore[import-not-found, no-redef]
    from exchange import EventStream, Exchange  # type: ignore[import-not-found, no-redef]
    from procs import Proc, ProcTable, parse_resize, parse_signal  # type: ignore[import-not-found, no-redef]
    from routes_exec import command_request  # type: ignore[import-not-found, no-redef]

MAX_STDIN_BODY = 1 * 2**20


def spawn(ex: Exchange, procs: ProcTable) -> None:
    ex.answer_json(procs.start(command_request(ex)).info())


def list_running(ex: Exchange, procs: ProcTable) -> None:
    ex.answer_json({"procs": [proc.info() for proc in procs.running()]})


def one(ex: Exchange, procs: ProcTable, method: str) -> None:
    """A route under /procs/{pid}/ (or none: answered no_such_route)."""
    try:
        _one(ex, procs, method)
    except ValueError as e:  # a body that is not JSON, or digits int() does not take ("²")
        raise p.Refusal(p.ERR_BAD_REQUEST, f"bad request: {e}") from None


def _one(ex: Exchange, procs: ProcTable, method: str) -> None:
    _, _, rest = ex.route().partition(p.PROCS + "/")
    pid_text, _, action = rest.partition("/")
    if not pid_text.isdigit() or len(pid_text) > 9:
        raise p.Refusal(p.ERR_NO_ROUTE, "no such route")
    proc = procs.get(int(pid_text))
    if method == "GET" and action == "":  # one process, ended or not
        return ex.answer_json(proc.info())
    if method == "GET" and action == p.PROC_EVENTS:
        return _follow(ex, proc)
    if method != "POST":
        raise p.Refusal(p.ERR_NO_ROUTE, "no such route")
    body = bytearray()
    for part in ex.body():
        body += part
        if len(body) > MAX_STDIN_BODY:
            raise p.Refusal(p.ERR_BODY_TOO_LARGE, f"requests are limited to {MAX_STDIN_BODY} bytes")
    if action == p.PROC_STDIN:
        proc.write_stdin(bytes(body))
        return ex.answer_json({})
    if action == p.PROC_STDIN_CLOSE:
        proc.close_stdin()
        return ex.answer_json({})
    req = json.loads(body or b"{}")
    if action == p.PROC_SIGNAL:
        return ex.answer_json({"signalled": proc.signal(parse_signal(req))})
    if action == p.PROC_RESIZE:
        proc.resize(*parse_resize(req))
        return ex.answer_json({})
    raise p.Refusal(p.ERR_NO_ROUTE, "no such route")


def _follow(ex: Exchange, proc: Proc) -> None:
    """Replay the process' buffered output from `after`, then stream on until it exits."""
    after = ex.query().get("after", "-1")
    cursor = int(after) + 1 if after.lstrip("-").isdigit() else 0
    stream = EventStream(ex)
    done = False
    while stream.alive and not done:
        batch, cursor, done = proc.read(cursor, L.PING_SECONDS)
        for ev in batch:
            stream.send(ev)
        if not batch:
            stream.send({"t": p.EVENT_PING})
    stream.close()
