"""`Events`: what happened to the team's boxes, snapshots and template builds, in order.

    page = Events.list(after=0)
    for event in page.events: ...
    page = Events.list(after=page.next)   # the next ones, none twice
    for event in Events.stream(after=page.next): ...   # as they happen (async: Events.stream_async)

What it sends lives in `hutch.sdk.ops.events`; the server also streams them (`GET /v1/events/stream`,
server-sent events, and `hutch events --follow`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Sequence

from hutch.sdk.config import ConnectionConfig
from hutch.sdk.front import Job
from hutch.sdk.ops import events
from hutch.sdk.session import Session, iterate_awaited, iterate_blocking, run_awaited, run_blocking
from hutch.sdk.types import Event, EventPage


class Events:
    """The team's events, by cursor."""

    @classmethod
    def list(cls, *, after: int = 0, types: Sequence[str] = (), sandbox_id: str | None = None, limit: int = 100,
             api_key: str | None = None, base_url: str | None = None) -> EventPage:
        """Events past the cursor `after`, oldest first (at most `limit`); only of `types` and of
        `sandbox_id` if given. The page's `next` is the cursor to ask from next."""
        return run_blocking(*cls._page(after, types, sandbox_id, limit, api_key, base_url))

    @classmethod
    async def list_async(cls, *, after: int = 0, types: Sequence[str] = (), sandbox_id: str | None = None,
                         limit: int = 100, api_key: str | None = None, base_url: str | None = None) -> EventPage:
        """As `list`, awaited."""
        return await run_awaited(*cls._page(after, types, sandbox_id, limit, api_key, base_url))

    @classmethod
    def stream(cls, *, after: int | None = None, types: Sequence[str] = (), sandbox_id: str | None = None,
               api_key: str | None = None, base_url: str | None = None) -> Generator[Event, None, None]:
        """The team's events as they happen, for as long as you iterate (from past the cursor
        `after`; None: from now on). A broken connection is resumed from the last event seen:
        none is missed and none comes twice. `close()` it when done (or leave the `for` loop)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return iterate_blocking(Session(cfg), events.stream_events(cfg, after, types, sandbox_id))

    @classmethod
    def stream_async(cls, *, after: int | None = None, types: Sequence[str] = (), sandbox_id: str | None = None,
                     api_key: str | None = None, base_url: str | None = None) -> AsyncGenerator[Event, None]:
        """As `stream`, with `async for`."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return iterate_awaited(Session(cfg), events.stream_events(cfg, after, types, sandbox_id))

    @staticmethod
    def _page(after: int, types: Sequence[str], sandbox_id: str | None, limit: int, api_key: str | None,
              base_url: str | None) -> Job[EventPage]:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), events.list_events(cfg, after, types, sandbox_id, limit))
