"""A team's events (/v1/events): every change of its boxes', snapshots' and template builds' state,
paged by cursor or streamed (server-sent events) from one (hutch.services.events)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from hutch.server.auth import TeamDep
from hutch.server.state import StateDep
from hutch.services.events import MAX_CURSOR, MAX_PAGE, cursor_of, types_of
from hutch.services.models import EventPage

router = APIRouter()

Types = Annotated[list[str], Query(description="only these types (repeated, or comma-separated)")]
SandboxId = Annotated[str | None, Query(max_length=64, description="only this sandbox's")]


@router.get("/v1/events", response_model=EventPage)
async def list_events(st: StateDep, team_id: TeamDep, types: Types = [],  # noqa: B006 (FastAPI copies it)
                      sandbox_id: SandboxId = None,
                      after: Annotated[int, Query(ge=0, le=MAX_CURSOR, description="the cursor: events past this id")] = 0,
                      limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100) -> EventPage:
    """The team's events past `after`, oldest first."""
    return st.events.page(team_id, after, types_of(types), sandbox_id, limit)


@router.get("/v1/events/stream", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}})
async def stream_events(st: StateDep, team_id: TeamDep, types: Types = [],  # noqa: B006
                        sandbox_id: SandboxId = None,
                        after: Annotated[str | None, Query(description="the cursor to stream from; "
                                                                       "none: from now on")] = None,
                        last_event_id: Annotated[str | None, Header()] = None) -> StreamingResponse:
    """The team's events as they happen, as server-sent events whose ids are cursors: a client that
    reconnects with `Last-Event-ID` (or `after`) gets every event past it, none twice."""
    start = cursor_of(last_event_id) if last_event_id else cursor_of(after)
    lines = st.events.open_stream(team_id, start, types_of(types), sandbox_id)
    return StreamingResponse(lines, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
