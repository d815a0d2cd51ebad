"""A team's events as the API serves them: a page from a cursor, and a stream (server-sent events)
that picks up from the cursor a client last saw (`Last-Event-ID`), so a reconnect neither misses
nor repeats one.

The store orders events (hutch.store.events); a stream asks it for what is past its cursor every
POLL_SECONDS, so every API server of a fleet streams every event, in that one order. A team has at
most MAX_STREAMS open at once (429 past them): each holds a connection and a poll.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence

from hutch.errors import ApiError, Code
from hutch.services.models import EventInfo, EventPage, timestamp
from hutch.store import EventRecord, Store

MAX_PAGE = 1000
POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0  # a comment line: proxies between keep the connection, and a gone client is found
MAX_STREAMS = 16  # a team's open streams, per API server


def info(rec: EventRecord) -> EventInfo:
    return EventInfo(id=rec.id, type=rec.type, at=timestamp(rec.at), sandbox_id=rec.sandbox_id, data=rec.data)


TYPES = frozenset({"sandbox.created", "sandbox.updated", "sandbox.paused", "sandbox.resumed", "sandbox.killed",
                   "sandbox.failed", "snapshot.created", "snapshot.deleted", "template.build.queued",
                   "template.build.running", "template.build.ready", "template.build.failed",
                   "template.build.cancelled", "volume.created", "volume.deleted", "webhook.disabled"})
MAX_CURSOR = 2**63 - 1


def types_of(asked: Sequence[str]) -> list[str]:
    """`types` as given: repeated (`?types=a&types=b`) or comma-separated, or both; 400 for one
    that no event has (a filter with a typo would wait forever)."""
    wanted = [t.strip() for each in asked for t in each.split(",") if t.strip()]
    unknown = sorted(set(wanted) - TYPES)
    if unknown:
        raise ApiError(Code.INVALID_REQUEST, f"unknown event type {json.dumps(unknown[0][:64])}; "
                                             f"the types: {', '.join(sorted(TYPES))}")
    return wanted


class Events:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._streams: Counter[str] = Counter()

    def page(self, team_id: str, after: int, types: Sequence[str], sandbox_id: str | None, limit: int) -> EventPage:
        found = self.store.events(team_id, after=after, types=types, sandbox_id=sandbox_id, limit=limit)
        return EventPage(events=[info(e) for e in found], next=found[-1].id if found else after)

    def open_stream(self, team_id: str, after: int | None, types: Sequence[str],
                    sandbox_id: str | None) -> AsyncIterator[bytes]:
        """The stream's lines, from `after` (None: from now on); refused (429) past the team's cap.
        Counted while its lines are read (a response never started holds no place)."""
        if self._streams[team_id] >= MAX_STREAMS:
            raise ApiError(Code.RATE_LIMITED, f"this team has {MAX_STREAMS} event streams open, the most it may; "
                                              "close one first")
        return self._lines(team_id, after, types, sandbox_id)

    async def _lines(self, team_id: str, after: int | None, types: Sequence[str],
                     sandbox_id: str | None) -> AsyncIterator[bytes]:
        self._streams[team_id] += 1
        try:
            cursor = after if after is not None else await asyncio.to_thread(self.store.last_event_id)
            yield b": events past %d\n\n" % cursor  # at once: the client knows the stream is open
            quiet = 0.0
            while True:
                found = await asyncio.to_thread(self.store.events, team_id, after=cursor, types=types,
                                                sandbox_id=sandbox_id, limit=MAX_PAGE)
                for e in found:
                    yield sse(e)
                    cursor = e.id
                if found:
                    quiet = 0.0
                    continue
                await asyncio.sleep(POLL_SECONDS)
                quiet += POLL_SECONDS
                if quiet >= KEEPALIVE_SECONDS:
                    quiet = 0.0
                    yield b": keep-alive\n\n"
        finally:
            self._streams[team_id] -= 1
            if self._streams[team_id] <= 0:
                del self._streams[team_id]


def sse(e: EventRecord) -> bytes:
    """One event as a server-sent event: its id is the cursor a reconnect names (Last-Event-ID)."""
    return f"id: {e.id}\nevent: {e.type}\ndata: {info(e).model_dump_json()}\n\n".encode()


def cursor_of(value: str | None) -> int | None:
    """A cursor from a query or a Last-Event-ID header; None if absent; 400 if not one."""
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= 19 and int(value) <= MAX_CURSOR):
        raise ApiError(Code.INVALID_REQUEST, f"not an event cursor: {json.dumps(value[:40])}")
    return int(value)
