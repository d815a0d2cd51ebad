"""E2B's lifecycle events API over hutch's events (hutch.store.events): `GET /events/sandboxes`
(the team's) and `GET /events/sandboxes/{sandboxID}`, newest first unless `orderAsc`, by `offset`
and `limit` (1-100, 10 by default), `types` repeated. Each is E2B's `SandboxEvent`: its type
`sandbox.lifecycle.{created,updated,paused,resumed,killed,checkpointed}` (a failed box is a kill
whose `kill_reason` says why; a snapshot is a checkpoint), its id a UUID made of hutch's cursor.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from hutch.e2b.common import Ctx, iso
from hutch.errors import ApiError, Code
from hutch.store import EventRecord, SandboxRecord

PREFIX = "sandbox.lifecycle."
# hutch's type: E2B's, and its legacy label
TYPES = {"sandbox.created": ("created", "create"), "sandbox.updated": ("updated", "update"),
         "sandbox.paused": ("paused", "pause"), "sandbox.resumed": ("resumed", "resume"),
         "sandbox.killed": ("killed", "kill"), "sandbox.failed": ("killed", "kill"),
         "snapshot.created": ("checkpointed", "checkpoint")}
MAX_LIMIT = 100



def ours(asked: list[str]) -> list[str]:
    """E2B's type names as hutch's (a kill is hutch's kill or failure); 400 for one E2B has not."""
    wanted = {t.removeprefix(PREFIX) for t in asked}
    unknown = wanted - {theirs for theirs, _ in TYPES.values()}
    if unknown:
        raise ApiError(Code.INVALID_REQUEST, f"unknown event type: {PREFIX}{sorted(unknown)[0]}")
    return [ours for ours, (theirs, _) in TYPES.items() if theirs in wanted]


def _data(e: EventRecord) -> dict[str, Any] | None:
    if e.type in ("sandbox.killed", "sandbox.failed"):
        return {"kill_reason": str(e.data.get("reason") or "unknown")}
    if e.type == "sandbox.updated" and e.data.get("timeout_seconds") is not None:
        return {"set_timeout": iso(e.at + float(e.data["timeout_seconds"]))}
    return None


def shown(e: EventRecord, box: SandboxRecord | None) -> dict[str, Any]:
    theirs, label = TYPES[e.type]
    template = (box.template_id if box else None) or str(e.data.get("template_id") or "")
    return {"id": str(uuid.UUID(int=e.id)), "version": "v1", "type": PREFIX + theirs,
            "eventCategory": "lifecycle", "eventLabel": label, "eventData": _data(e),
            "sandboxId": e.sandbox_id or "", "sandboxExecutionId": e.sandbox_id or "",
            "sandboxTemplateId": template, "sandboxBuildId": "", "sandboxTeamId": e.team_id,
            "timestamp": iso(e.at)}


def _number(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if not (raw.isascii() and raw.isdigit()) or not lo <= int(raw) <= hi:
        raise ApiError(Code.INVALID_REQUEST, f"{name} must be a whole number from {lo} to {hi}")
    return int(raw)


def event_routes(app: FastAPI, ctx: Any) -> None:
    """On E2B's control app: `ctx(request)` is its API-key check."""

    async def listed(request: Request, sandbox_id: str | None) -> JSONResponse:
        c: Ctx = await ctx(request)
        order = request.query_params.get("orderAsc", "false").lower()
        if order not in ("true", "false"):
            raise ApiError(Code.INVALID_REQUEST, "orderAsc must be true or false")
        asked = request.query_params.getlist("types")
        types = ours(asked) if asked else list(TYPES)
        offset = _number(request, "offset", 0, 0, 2**31 - 1)
        limit = _number(request, "limit", 10, 1, MAX_LIMIT)

        def read() -> list[dict[str, Any]]:  # the store's calls, off the event loop
            found = c.st.store.events(c.team_id, types=types, sandbox_id=sandbox_id, newest_first=order == "false",
                                      offset=offset, limit=limit)
            boxes = {i: c.st.store.get_sandbox(i, c.team_id, include_deleted=True)
                     for i in {e.sandbox_id for e in found if e.sandbox_id}}
            return [shown(e, boxes.get(e.sandbox_id or "")) for e in found]

        return JSONResponse(await run_in_threadpool(read))

    @app.get("/events/sandboxes")
    async def team_events(request: Request) -> Any:
        return await listed(request, None)

    @app.get("/events/sandboxes/{sandbox_id}")
    async def sandbox_events(sandbox_id: str, request: Request) -> Any:
        return await listed(request, sandbox_id)
