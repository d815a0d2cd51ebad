"""A team's webhooks (/v1/webhooks): endpoints its events are POSTed to, signed; and each one's
delivery attempts (hutch.services.webhooks, hutch.services.deliveries)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from hutch.server.auth import TeamDep
from hutch.server.state import StateDep
from hutch.services.models import CreateWebhook, DeliveryInfo, UpdateWebhook, WebhookInfo
from hutch.services.webhooks import MAX_DELIVERIES_SHOWN, info

router = APIRouter()
# The calls that only read or delete are plain functions: FastAPI runs them on its threads, off the
# event loop (the store's calls block).
WebhookId = Annotated[str, Path(max_length=64)]


@router.post("/v1/webhooks", status_code=201, response_model=WebhookInfo)
async def create_webhook(body: CreateWebhook, st: StateDep, team_id: TeamDep) -> WebhookInfo:
    """Register an endpoint: it is sent the team's events from now on (those of `types`, or all),
    each signed in `Hutch-Signature`. The answer holds the secret, once."""
    rec, secret = await st.webhooks.create(team_id, body)
    return info(rec, secret)


@router.get("/v1/webhooks", response_model=list[WebhookInfo])
def list_webhooks(st: StateDep, team_id: TeamDep) -> list[WebhookInfo]:
    return [info(w) for w in st.webhooks.of_team(team_id)]


@router.get("/v1/webhooks/{webhook_id}", response_model=WebhookInfo)
def get_webhook(webhook_id: WebhookId, st: StateDep, team_id: TeamDep) -> WebhookInfo:
    return info(st.webhooks.get(team_id, webhook_id))


@router.patch("/v1/webhooks/{webhook_id}", response_model=WebhookInfo)
async def update_webhook(webhook_id: WebhookId, body: UpdateWebhook, st: StateDep, team_id: TeamDep) -> WebhookInfo:
    """Change what the body names; `enabled: true` after it was disabled goes on from the first
    event it was not delivered."""
    return info(await st.webhooks.update(team_id, webhook_id, body))


@router.delete("/v1/webhooks/{webhook_id}", status_code=204)
def delete_webhook(webhook_id: WebhookId, st: StateDep, team_id: TeamDep) -> Response:
    st.webhooks.delete(team_id, webhook_id)
    return Response(status_code=204)


@router.get("/v1/webhooks/{webhook_id}/deliveries", response_model=list[DeliveryInfo])
def list_deliveries(webhook_id: WebhookId, st: StateDep, team_id: TeamDep,
                          limit: Annotated[int, Query(ge=1, le=MAX_DELIVERIES_SHOWN)] = 100) -> list[DeliveryInfo]:
    """Its delivery attempts, newest first: each with the endpoint's status, or why none came."""
    return st.webhooks.deliveries(team_id, webhook_id, limit)
