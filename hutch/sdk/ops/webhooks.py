"""Webhooks' calls: register, list, read, change and delete a team's endpoints, and read their
delivery attempts."""

from __future__ import annotations

import json
from typing import Any

from hutch.sdk import routes
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.flow import Call, Flow, send
from hutch.sdk.types import WebhookDelivery, WebhookInfo


def create(cfg: ConnectionConfig, body: dict[str, Any]) -> Flow[WebhookInfo]:
    reply = yield from send(Call(*routes.CREATE_WEBHOOK.at(cfg.base_url), cfg.headers(), json=body))
    return WebhookInfo.from_json(json.loads(reply.body))


def get(cfg: ConnectionConfig, webhook_id: str) -> Flow[WebhookInfo]:
    reply = yield from send(Call(*routes.GET_WEBHOOK.at(cfg.base_url, webhook_id=webhook_id), cfg.headers()))
    return WebhookInfo.from_json(json.loads(reply.body))


def list_all(cfg: ConnectionConfig) -> Flow[list[WebhookInfo]]:
    reply = yield from send(Call(*routes.LIST_WEBHOOKS.at(cfg.base_url), cfg.headers()))
    return [WebhookInfo.from_json(w) for w in json.loads(reply.body)]


def update(cfg: ConnectionConfig, webhook_id: str, body: dict[str, Any]) -> Flow[WebhookInfo]:
    reply = yield from send(Call(*routes.UPDATE_WEBHOOK.at(cfg.base_url, webhook_id=webhook_id), cfg.headers(), json=body))
    return WebhookInfo.from_json(json.loads(reply.body))


def delete(cfg: ConnectionConfig, webhook_id: str) -> Flow[None]:
    yield from send(Call(*routes.DELETE_WEBHOOK.at(cfg.base_url, webhook_id=webhook_id), cfg.headers()))


def deliveries(cfg: ConnectionConfig, webhook_id: str, limit: int) -> Flow[list[WebhookDelivery]]:
    reply = yield from send(Call(*routes.WEBHOOK_DELIVERIES.at(cfg.base_url, webhook_id=webhook_id), cfg.headers(),
                                 params={"limit": str(limit)}))
    return [WebhookDelivery.from_json(d) for d in json.loads(reply.body)]
