"""A team's webhooks: endpoints its events are POSTed to, signed (hutch.services.deliveries sends
them). Made, listed, changed and deleted here; a URL is checked where it leads when it is set (and
again at every delivery), and the signing secret is sealed at rest and shown once.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from collections.abc import Callable, Collection

from hutch.errors import ApiError, Code
from hutch.secrets.vault import Vault
from hutch.services.deliveries import Destinations, RefusedDestination, bound_to
from hutch.services.events import types_of
from hutch.services.models import CreateWebhook, DeliveryInfo, UpdateWebhook, WebhookInfo, timestamp
from hutch.store import DeliveryRecord, Store, WebhookRecord

SECRET_PREFIX = "whsec_"
MAX_DELIVERIES_SHOWN = 1000


def info(rec: WebhookRecord, secret: str | None = None) -> WebhookInfo:
    return WebhookInfo(id=rec.id, name=rec.name, url=rec.url, types=rec.types, enabled=rec.enabled,
                       disabled_reason=rec.disabled_reason, created_at=timestamp(rec.created_at),
                       updated_at=timestamp(rec.updated_at), secret=secret)


def delivery_info(d: DeliveryRecord) -> DeliveryInfo:
    return DeliveryInfo(id=d.id, event_id=d.event_id, event_type=d.event_type, attempt=d.attempt, at=timestamp(d.at),
                        status=d.status, ok=d.ok, error=d.error, duration_ms=d.duration_ms)


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


class Webhooks:
    def __init__(self, store: Store, vault: Vault, destinations: Destinations, team_max: int) -> None:
        self.store, self.vault, self.destinations, self.team_max = store, vault, destinations, team_max
        self.changed: Callable[[], None] = lambda: None  # the deliverer's wake (State wires it)

    async def checked_url(self, url: str, team_id: str) -> str:
        """The URL, if the host may send to where it leads now; 400 `webhook_url_refused` if not."""
        try:
            await self.destinations.resolve(url, team_id)
        except RefusedDestination as e:
            raise ApiError(Code.WEBHOOK_URL_REFUSED, f"webhook URL refused: {e}") from None
        return url

    async def create(self, team_id: str, req: CreateWebhook, flavor: str = "hutch",
                     types: Collection[str] | None = None) -> tuple[WebhookRecord, str]:
        """The webhook made, and its secret (the one given, or a new one). `types`: already
        checked (E2B's, mapped); else `req.types` is checked as hutch's."""
        wanted = list(types) if types is not None else types_of(req.types)  # before the URL's lookup
        url = await self.checked_url(req.url, team_id)
        secret = req.secret or new_secret()
        webhook_id = str(uuid.uuid4())
        rec = WebhookRecord(id=webhook_id, team_id=team_id, name=req.name, url=url, types=sorted(set(wanted)),
                            sealed=self.vault.seal(secret, bound_to(team_id, webhook_id)), flavor=flavor,
                            enabled=req.enabled)
        if not await asyncio.to_thread(self.store.insert_webhook, rec, self.team_max):
            raise ApiError(Code.TOO_MANY_WEBHOOKS, f"this team has {self.team_max} webhooks, the most it may; "
                                                   "delete one first")
        self.changed()
        return rec, secret

    def get(self, team_id: str, webhook_id: str, flavor: str | None = None) -> WebhookRecord:
        rec = self.store.get_webhook(webhook_id, team_id)
        if rec is None or (flavor is not None and rec.flavor != flavor):
            raise ApiError(Code.WEBHOOK_NOT_FOUND, f"no webhook {json.dumps(webhook_id[:64])}")
        return rec

    def of_team(self, team_id: str, flavor: str | None = None) -> list[WebhookRecord]:
        return self.store.list_webhooks(team_id, flavor)

    async def update(self, team_id: str, webhook_id: str, req: UpdateWebhook, flavor: str | None = None,
                     types: Collection[str] | None = None) -> WebhookRecord:
        await asyncio.to_thread(self.get, team_id, webhook_id, flavor)
        values: dict[str, object] = {}
        if types is not None:
            values["types"] = sorted(set(types))
        elif req.types is not None:
            values["types"] = sorted(set(types_of(req.types)))
        if req.url is not None:
            values["url"] = await self.checked_url(req.url, team_id)
        if req.name is not None:
            values["name"] = req.name
        if req.secret is not None:
            values["sealed"] = self.vault.seal(req.secret, bound_to(team_id, webhook_id))
        if req.enabled is not None:
            values["enabled"] = req.enabled
        rec = await asyncio.to_thread(lambda: self.store.update_webhook(webhook_id, team_id, **values) if values
                                      else self.get(team_id, webhook_id))
        if rec is None:  # deleted meanwhile
            raise ApiError(Code.WEBHOOK_NOT_FOUND, f"no webhook {json.dumps(webhook_id[:64])}")
        self.changed()
        return rec

    def delete(self, team_id: str, webhook_id: str, flavor: str | None = None) -> None:
        self.get(team_id, webhook_id, flavor)
        if not self.store.delete_webhook(webhook_id, team_id):
            raise ApiError(Code.WEBHOOK_NOT_FOUND, f"no webhook {json.dumps(webhook_id[:64])}")

    def deliveries(self, team_id: str, webhook_id: str, limit: int) -> list[DeliveryInfo]:
        self.get(team_id, webhook_id)
        return [delivery_info(d) for d in self.store.deliveries(webhook_id, min(limit, MAX_DELIVERIES_SHOWN))]
