"""The team's events: a page from a cursor, and the stream of them as they happen."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import httpx

from hutch.sdk import routes
from hutch.sdk.codes import SdkCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import SandboxError, ServerError
from hutch.sdk.flow import Call, Emit, Flow, NextLine, Sleep, backoff, send
from hutch.sdk.types import Event, EventPage


def list_events(cfg: ConnectionConfig, after: int, types: Sequence[str], sandbox_id: str | None,
                limit: int) -> Flow[EventPage]:
    params = {"after": str(after), "limit": str(limit)}
    if types:
        params["types"] = ",".join(types)
    if sandbox_id:
        params["sandbox_id"] = sandbox_id
    reply = yield from send(Call(*routes.LIST_EVENTS.at(cfg.base_url), cfg.headers(), params=params))
    return EventPage.from_json(json.loads(reply.body))


STREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=45.0, write=60.0, pool=10.0)  # the server says something every 15 s
RECONNECT_FOR = 120.0  # seconds a stream may fail to open again (a server restarting) before it is given up
MAX_EVENT = 2**20  # bytes of one event's data lines: a server sending more is not one


def stream_events(cfg: ConnectionConfig, after: int | None, types: Sequence[str],
                  sandbox_id: str | None) -> Flow[None]:
    """Emit each event as it happens (from past `after`; None: from when the stream opens), for as
    long as the caller reads. A stream that breaks or goes silent is opened again from the last
    event seen (its id is the cursor: nothing is missed, nothing comes twice); one that cannot be
    opened again for RECONNECT_FOR seconds ends with the error."""
    params: dict[str, str] = {}
    if types:
        params["types"] = ",".join(types)
    if sandbox_id:
        params["sandbox_id"] = sandbox_id
    cursor, failures, down_since = after, 0, None
    while True:
        query = {**params, **({"after": str(cursor)} if cursor is not None else {})}
        try:
            yield from send(Call(*routes.STREAM_EVENTS.at(cfg.base_url), cfg.headers(), params=query, stream=True,
                                 timeout=STREAM_TIMEOUT))
        except SandboxError as e:  # down or restarting (no answer, 429, 5xx): again, for a while
            if e.status_code is not None and e.status_code < 500 and e.status_code != 429:
                raise
            now = time.monotonic()
            down_since = down_since if down_since is not None else now
            if now - down_since > RECONNECT_FOR:
                raise
            failures += 1
            yield Sleep(backoff(failures))
            continue
        down_since, data, size = None, [], 0
        while True:
            try:
                line = yield NextLine()
            except (httpx.TimeoutException, httpx.TransportError):
                line = None
            if line is None:
                break
            if line.startswith(":"):
                opened = line.removeprefix(": events past ").strip()
                if line.startswith(": events past ") and opened.isascii() and opened.isdigit():
                    failures = 0  # it opened: a later break starts its backoff again
                    if cursor is None:  # from now on: where now is
                        cursor = int(opened)
                continue
            if line.startswith("data:"):
                size += len(line)
                if size > MAX_EVENT:
                    raise ServerError("an event of the stream is too large", code=SdkCode.STREAM_ENDED)
                data.append(line[5:].removeprefix(" "))
            elif not line and data:
                event = Event.from_json(json.loads("\n".join(data)))
                data, size = [], 0
                cursor = event.id
                yield Emit(event)
        failures += 1
        yield Sleep(backoff(min(failures, 3)))
