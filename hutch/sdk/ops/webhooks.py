"""Webhooks' calls: register, list, read, change and delete a team's endpoints, and read their
delivery attempts."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from hutch.sdk.config import ConnectionConfig
from hutch.sdk.flow import Call, Flow, send
from hutch.sdk.types import WebhookDelivery, WebhookInfo


def _url(cfg: ConnectionConfig, webhook_id: str = "") -> str:
    return f"{cfg.base_url}/v1/webhooks" + (f"/{quote(webhook_id, safe='')}" if webhook_id else "")


def create(cfg: ConnectionConfig, body: dict[str, Any]) -> Flow[WebhookInfo]:
    reply = yield from send(Call("POST", _url(cfg), cfg.headers(), json=body))
    return WebhookInfo.from_json(json.loads(reply.body))


def get(cfg: ConnectionConfig, webhook_id: str) -> Flow[WebhookInfo]:
    reply = yield from send(Call("GET", _url(cfg, webhook_id), cfg.headers()))
    return WebhookInfo.from_json(json.loads(reply.body))


def list_all(cfg: ConnectionConfig) -> Flow[list[WebhookInfo]]:
    reply = yield from send(Call("GET", _url(cfg), cfg.headers()))
    return [WebhookInfo.from_json(w) for w in json.loads(reply.body)]


def update(cfg: ConnectionConfig, webhook_id: str, body: dict[str, Any]) -> Flow[WebhookInfo]:
    reply = yield from send(Call("PATCH", _url(cfg, webhook_id), cfg.headers(), json=body))
    return WebhookInfo.from_json(json.loads(reply.body))


def delete(cfg: ConnectionConfig, webhook_id: str) -> Flow[None]:
    yield from send(Call("DELETE", _url(cfg, webhook_id), cfg.headers()))


def deliveries(cfg: ConnectionConfig, webhook_id: str, limit: int) -> Flow[list[WebhookDelivery]]:
    reply = yield from send(Call("GET", _url(cfg, webhook_id) + "/deliveries", cfg.headers(),
                                 params={"limit": str(limit)}))
    return [WebhookDelivery.from_json(d) for d in json.loads(reply.body)]
