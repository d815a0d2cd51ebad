"""The console's events and webhooks: the team's newest events (refreshed by htmx), and its
webhooks with each one's last delivery; register one (its secret shown once), enable or disable
it, delete it. Through the same services as the API's routes (hutch.services.webhooks)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from pydantic import ValidationError
from starlette.responses import Response

from hutch.console import session
from hutch.console.boxes import SessionDep
from hutch.console.pages import StateDep, changed, page, refused_form
from hutch.errors import ApiError, Code
from hutch.server.state import State
from hutch.services.events import info as event_info
from hutch.services.models import CreateWebhook, UpdateWebhook
from hutch.services.webhooks import delivery_info
from hutch.services.webhooks import info as webhook_info

router = APIRouter()

SHOWN_EVENTS = 50
PROBLEMS = {  # what a form's field must be, said the way a person reads it (never echoing what was sent)
    "url": "the URL is http:// or https://, at most 2048 characters",
    "types": "the types are event types separated by commas (sandbox.created, ...), at most 32",
    "name": "the name is at most 128 characters",
}


def _events(st: State, team_id: str) -> list[Any]:
    return [event_info(e) for e in st.store.events(team_id, newest_first=True, limit=SHOWN_EVENTS)]


def _webhooks(st: State, team_id: str) -> list[tuple[Any, Any]]:
    """Each webhook with its newest delivery attempt (None: none yet)."""
    return [(webhook_info(w), next((delivery_info(d) for d in st.store.deliveries(w.id, 1)), None))
            for w in st.webhooks.of_team(team_id)]


@router.get("/events")
async def events_page(request: Request, st: StateDep, s: SessionDep) -> Response:
    return page(request, "events.html", s, events=await asyncio.to_thread(_events, st, s.team_id))


@router.get("/events/rows")
async def event_rows(request: Request, st: StateDep, s: SessionDep) -> Response:
    return page(request, "_event_rows.html", s, events=await asyncio.to_thread(_events, st, s.team_id))


@router.get("/webhooks")
async def webhooks_page(request: Request, st: StateDep, s: SessionDep) -> Response:
    return page(request, "webhooks.html", s, webhooks=await asyncio.to_thread(_webhooks, st, s.team_id), made=None)


@router.get("/webhooks/rows")
async def webhook_rows(request: Request, st: StateDep, s: SessionDep) -> Response:
    return page(request, "_webhook_rows.html", s, webhooks=await asyncio.to_thread(_webhooks, st, s.team_id))


def _request(fields: dict[str, str]) -> CreateWebhook:
    types = [t.strip() for t in fields.get("types", "").split(",") if t.strip()]
    try:
        return CreateWebhook(url=fields.get("url", "").strip(), types=types, name=fields.get("name", "").strip())
    except ValidationError as e:
        raise refused_form(e, PROBLEMS, "url") from None


@router.post("/webhooks")
async def create(request: Request, st: StateDep) -> Response:
    """A webhook from the page's form; the answer shows its secret, this once."""
    s, fields = await session.changing(st, request)
    rec, secret = await st.webhooks.create(s.team_id, _request(fields))
    made = webhook_info(rec, secret)
    if request.headers.get("hx-request"):
        answer = page(request, "_webhook_made.html", s, made=made)
        answer.headers["HX-Trigger"] = "webhooks-changed"
        return answer
    return page(request, "webhooks.html", s, webhooks=await asyncio.to_thread(_webhooks, st, s.team_id), made=made)


@router.post("/webhooks/{webhook_id}/{action}")
async def change(request: Request, st: StateDep, webhook_id: str, action: str) -> Response:
    """enable, disable or delete (the page asked the person first)."""
    s, _ = await session.changing(st, request)
    if action == "delete":
        await asyncio.to_thread(st.webhooks.delete, s.team_id, webhook_id)
    elif action in ("enable", "disable"):
        await st.webhooks.update(s.team_id, webhook_id, UpdateWebhook(enabled=action == "enable"))
    else:
        raise ApiError(Code.NOT_FOUND, "no such action on a webhook")
    return changed(request, "webhooks-changed", "/console/webhooks")
