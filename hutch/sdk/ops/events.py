"""The team's events: a page from a cursor, and the stream of them as they happen."""

from __future__ import annotations

import json
from collections.abc import Sequence

import httpx

from hutch.sdk.codes import SdkCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import ServerError
from hutch.sdk.flow import RETRIES, Call, Emit, Flow, NextLine, Sleep, backoff, send
from hutch.sdk.types import Event, EventPage


def list_events(cfg: ConnectionConfig, after: int, types: Sequence[str], sandbox_id: str | None,
                limit: int) -> Flow[EventPage]:
    params = {"after": str(after), "limit": str(limit)}
    if types:
        params["types"] = ",".join(types)
    if sandbox_id:
        params["sandbox_id"] = sandbox_id
    reply = yield from send(Call("GET", f"{cfg.base_url}/v1/events", cfg.headers(), params=params))
    return EventPage.from_json(json.loads(reply.body))


STREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=45.0, write=60.0, pool=10.0)  # the server says something every 15 s


def stream_events(cfg: ConnectionConfig, after: int | None, types: Sequence[str],
                  sandbox_id: str | None) -> Flow[None]:
    """Emit each event as it happens (from past `after`; None: from now on), for as long as the
    caller reads. A stream that breaks or goes silent is asked for again from the last event seen
    (its id is the cursor: nothing is missed, nothing comes twice)."""
    params: dict[str, str] = {}
    if types:
        params["types"] = ",".join(types)
    if sandbox_id:
        params["sandbox_id"] = sandbox_id
    cursor, failures = after, 0
    while True:
        query = {**params, **({"after": str(cursor)} if cursor is not None else {})}
        yield from send(Call("GET", f"{cfg.base_url}/v1/events/stream", cfg.headers(), params=query, stream=True,
                             timeout=STREAM_TIMEOUT))
        seen, fields = False, {}
        while True:
            try:
                line = yield NextLine()
            except (httpx.TimeoutException, httpx.TransportError):
                line = None
            if line is None:
                break
            if line.startswith(":"):
                if cursor is None and line.startswith(": events past "):  # from now on: where now is
                    cursor = int(line.removeprefix(": events past ").strip() or 0)
                continue
            if line:
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value
                continue
            if "data" in fields:
                event = Event.from_json(json.loads(fields["data"]))
                cursor, seen = event.id, True
                yield Emit(event)
            fields = {}
        failures = 0 if seen else failures + 1
        if failures > RETRIES:
            raise ServerError("the events' stream kept ending", code=SdkCode.STREAM_ENDED)
        yield Sleep(backoff(failures or 1))
