"""E2B's lifecycle webhooks over hutch's (hutch.services.webhooks): /events/webhooks (register,
list, get, update, delete), `events` in E2B's names (`sandbox.lifecycle.created`, ...). Each
delivery is E2B's event (hutch.e2b.events), signed as E2B signs: `e2b-signature`, the SHA-256 of
the secret followed by the body in base64 without padding, with `e2b-webhook-id`,
`e2b-delivery-id` and `e2b-signature-version: v1`. Delivered, retried, recorded and disabled as
hutch's own are (hutch.services.deliveries).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from hutch.e2b.common import Ctx, iso
from hutch.e2b.events import PREFIX, TYPES, ours, shown
from hutch.errors import ApiError, Code
from hutch.services.deliveries import Flavor, e2b_signature
from hutch.services.models import CreateWebhook, UpdateWebhook
from hutch.store import EventRecord, Store, WebhookRecord

FLAVOR = "e2b"
MAX_SECRET = 256


def flavor(store: Store) -> Flavor:
    """How E2B's webhooks are shaped and signed, for the deliverer (app.py wires it in)."""

    def payload(e: EventRecord) -> bytes:
        box = store.get_sandbox(e.sandbox_id, e.team_id, include_deleted=True) if e.sandbox_id else None
        return json.dumps(shown(e, box), separators=(",", ":")).encode()

    def headers(hook: WebhookRecord, secret: str, body: bytes, _: EventRecord, delivery: str) -> dict[str, str]:
        return {"e2b-webhook-id": hook.id, "e2b-delivery-id": delivery, "e2b-signature-version": "v1",
                "e2b-signature": e2b_signature(secret, body)}

    return Flavor(frozenset(TYPES), payload, headers)


def _shown(rec: WebhookRecord) -> dict[str, Any]:
    events = sorted({PREFIX + TYPES[t][0] for t in rec.types or TYPES if t in TYPES})  # none chosen: all
    return {"id": rec.id, "teamID": rec.team_id, "name": rec.name, "url": rec.url, "enabled": rec.enabled,
            "events": events, "createdAt": iso(rec.created_at), "updatedAt": iso(rec.updated_at)}


def _events(body: dict[str, Any]) -> list[str] | None:
    events = body.get("events")
    if events is None:
        return None
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events) or len(events) > 32:
        raise ApiError(Code.INVALID_REQUEST, "events is a list of event types (sandbox.lifecycle.created, ...)")
    return ours(events)


def _text(body: dict[str, Any], name: str, most: int) -> str | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, str) or not value or len(value) > most):
        raise ApiError(Code.INVALID_REQUEST, f"{name} is a string of 1 to {most} characters")
    return value


def _enabled(body: dict[str, Any]) -> bool | None:
    value = body.get("enabled")
    if value is not None and not isinstance(value, bool):
        raise ApiError(Code.INVALID_REQUEST, "enabled is true or false")
    return value


def webhook_routes(app: FastAPI, ctx: Any, body_of: Any) -> None:
    """On E2B's control app: `ctx(request)` is its API-key check, `body_of(request)` its JSON body."""

    @app.post("/events/webhooks", status_code=201)
    async def register(request: Request) -> Any:
        c: Ctx = await ctx(request)
        body = await body_of(request)
        url = _text(body, "url", 2048)
        if url is None:
            raise ApiError(Code.INVALID_REQUEST, "url is required")
        secret = _text(body, "signatureSecret", MAX_SECRET)
        if secret is None:
            raise ApiError(Code.INVALID_REQUEST, "signatureSecret is required: deliveries are signed with it")
        enabled = _enabled(body)
        req = CreateWebhook.model_construct(url=url, types=[], name=_text(body, "name", 128) or "",
                                            secret=secret, enabled=True if enabled is None else enabled)
        rec, _ = await c.st.webhooks.create(c.team_id, req, FLAVOR, _events(body) or [])
        return JSONResponse(_shown(rec), status_code=201)

    @app.get("/events/webhooks")
    async def listed(request: Request) -> Any:
        c: Ctx = await ctx(request)
        return [_shown(w) for w in await run_in_threadpool(c.st.webhooks.of_team, c.team_id, FLAVOR)]

    @app.get("/events/webhooks/{webhook_id}")
    async def got(webhook_id: str, request: Request) -> Any:
        c: Ctx = await ctx(request)
        return _shown(await run_in_threadpool(c.st.webhooks.get, c.team_id, webhook_id, FLAVOR))

    @app.patch("/events/webhooks/{webhook_id}")
    async def update(webhook_id: str, request: Request) -> Any:
        c: Ctx = await ctx(request)
        body = await body_of(request)
        req = UpdateWebhook.model_construct(url=_text(body, "url", 2048), types=None, name=_text(body, "name", 128),
                                            secret=_text(body, "signatureSecret", MAX_SECRET), enabled=_enabled(body))
        return _shown(await c.st.webhooks.update(c.team_id, webhook_id, req, FLAVOR, _events(body)))

    @app.delete("/events/webhooks/{webhook_id}")
    async def delete(webhook_id: str, request: Request) -> Any:
        c: Ctx = await ctx(request)
        await run_in_threadpool(c.st.webhooks.delete, c.team_id, webhook_id, FLAVOR)
        return JSONResponse({}, status_code=200)
