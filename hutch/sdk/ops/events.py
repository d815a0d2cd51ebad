"""The team's events, a page from a cursor."""

from __future__ import annotations

import json
from collections.abc import Sequence

from hutch.sdk.config import ConnectionConfig
from hutch.sdk.flow import Call, Flow, send
from hutch.sdk.types import EventPage


def list_events(cfg: ConnectionConfig, after: int, types: Sequence[str], sandbox_id: str | None,
                limit: int) -> Flow[EventPage]:
    params = {"after": str(after), "limit": str(limit)}
    if types:
        params["types"] = ",".join(types)
    if sandbox_id:
        params["sandbox_id"] = sandbox_id
    reply = yield from send(Call("GET", f"{cfg.base_url}/v1/events", cfg.headers(), params=params))
    return EventPage.from_json(json.loads(reply.body))
