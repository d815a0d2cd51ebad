"""`Events`: what happened to the team's boxes, snapshots and template builds, in order.

    page = Events.list(after=0)
    for event in page.events: ...
    page = Events.list(after=page.next)   # the next ones, none twice

What it sends lives in `hutch.sdk.ops.events`; the server also streams them (`GET /v1/events/stream`,
server-sent events, and `hutch events --follow`).
"""

from __future__ import annotations

from collections.abc import Sequence

from hutch.sdk.config import ConnectionConfig
from hutch.sdk.front import Job
from hutch.sdk.ops import events
from hutch.sdk.session import Session, run_awaited, run_blocking
from hutch.sdk.types import EventPage


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

    @staticmethod
    def _page(after: int, types: Sequence[str], sandbox_id: str | None, limit: int, api_key: str | None,
              base_url: str | None) -> Job[EventPage]:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), events.list_events(cfg, after, types, sandbox_id, limit))
