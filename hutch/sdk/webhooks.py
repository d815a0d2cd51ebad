"""`Webhooks`: endpoints the team's events are POSTed to as they happen, signed; and
`verify_webhook`, the receiver's check of a delivery.

    hook = Webhooks.create("https://example.com/hooks/hutch", types=["sandbox.killed"])
    hook.secret                                  # shown once: keep it where the receiver reads it
    # in the receiver, with the body's bytes as they came:
    event = verify_webhook(body, headers["Hutch-Signature"], secret)

What it sends lives in `hutch.sdk.ops.webhooks`.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from hutch.sdk.codes import SdkCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import ValidationError
from hutch.sdk.flow import Flow
from hutch.sdk.front import Job
from hutch.sdk.ops import webhooks
from hutch.sdk.session import Session, run_awaited, run_blocking
from hutch.sdk.types import WebhookDelivery, WebhookInfo

T = TypeVar("T")
TOLERANCE = 300  # seconds: an older delivery is refused (a replay)


def _job(flow_of: Callable[..., Flow[T]], api_key: str | None, base_url: str | None, *args: Any) -> Job[T]:
    cfg = ConnectionConfig.resolve(api_key, base_url)
    return Job(Session(cfg), flow_of(cfg, *args))


def _body(**fields: Any) -> dict[str, Any]:
    return {k: list(v) if k == "types" else v for k, v in fields.items() if v is not None}


class Webhooks:
    """The team's webhooks. Each call has an awaited twin named `..._async`."""

    @classmethod
    def create(cls, url: str, *, types: Sequence[str] = (), name: str = "", secret: str | None = None,
               enabled: bool = True, api_key: str | None = None, base_url: str | None = None) -> WebhookInfo:
        """Register `url` for the team's events from now on (of `types`, or all). The answer's
        `secret` (the one given, or one hutch made) is shown this once."""
        return run_blocking(*cls._create(url, types, name, secret, enabled, api_key, base_url))

    @classmethod
    async def create_async(cls, url: str, *, types: Sequence[str] = (), name: str = "", secret: str | None = None,
                           enabled: bool = True, api_key: str | None = None, base_url: str | None = None
                           ) -> WebhookInfo:
        return await run_awaited(*cls._create(url, types, name, secret, enabled, api_key, base_url))

    @staticmethod
    def _create(url: str, types: Sequence[str], name: str, secret: str | None, enabled: bool, api_key: str | None,
                base_url: str | None) -> Job[WebhookInfo]:
        return _job(webhooks.create, api_key, base_url, _body(url=url, types=types, name=name, secret=secret,
                                                                enabled=enabled))

    @classmethod
    def list(cls, *, api_key: str | None = None, base_url: str | None = None) -> list[WebhookInfo]:
        return run_blocking(*_job(webhooks.list_all, api_key, base_url))

    @classmethod
    async def list_async(cls, *, api_key: str | None = None, base_url: str | None = None) -> builtins.list[WebhookInfo]:
        return await run_awaited(*_job(webhooks.list_all, api_key, base_url))

    @classmethod
    def get(cls, webhook_id: str, *, api_key: str | None = None, base_url: str | None = None) -> WebhookInfo:
        return run_blocking(*_job(webhooks.get, api_key, base_url, webhook_id))

    @classmethod
    async def get_async(cls, webhook_id: str, *, api_key: str | None = None, base_url: str | None = None
                        ) -> WebhookInfo:
        return await run_awaited(*_job(webhooks.get, api_key, base_url, webhook_id))

    @classmethod
    def update(cls, webhook_id: str, *, url: str | None = None, types: Sequence[str] | None = None,
               name: str | None = None, secret: str | None = None, enabled: bool | None = None,
               api_key: str | None = None, base_url: str | None = None) -> WebhookInfo:
        """Change what is given; `enabled=True` after hutch disabled it goes on from the first
        event it was not delivered."""
        body = _body(url=url, types=types, name=name, secret=secret, enabled=enabled)
        return run_blocking(*_job(webhooks.update, api_key, base_url, webhook_id, body))

    @classmethod
    async def update_async(cls, webhook_id: str, *, url: str | None = None, types: Sequence[str] | None = None,
                           name: str | None = None, secret: str | None = None, enabled: bool | None = None,
                           api_key: str | None = None, base_url: str | None = None) -> WebhookInfo:
        body = _body(url=url, types=types, name=name, secret=secret, enabled=enabled)
        return await run_awaited(*_job(webhooks.update, api_key, base_url, webhook_id, body))

    @classmethod
    def delete(cls, webhook_id: str, *, api_key: str | None = None, base_url: str | None = None) -> None:
        run_blocking(*_job(webhooks.delete, api_key, base_url, webhook_id))

    @classmethod
    async def delete_async(cls, webhook_id: str, *, api_key: str | None = None, base_url: str | None = None) -> None:
        await run_awaited(*_job(webhooks.delete, api_key, base_url, webhook_id))

    @classmethod
    def deliveries(cls, webhook_id: str, *, limit: int = 100, api_key: str | None = None,
                   base_url: str | None = None) -> builtins.list[WebhookDelivery]:
        """Its delivery attempts, newest first."""
        return run_blocking(*_job(webhooks.deliveries, api_key, base_url, webhook_id, limit))

    @classmethod
    async def deliveries_async(cls, webhook_id: str, *, limit: int = 100, api_key: str | None = None,
                               base_url: str | None = None) -> builtins.list[WebhookDelivery]:
        return await run_awaited(*_job(webhooks.deliveries, api_key, base_url, webhook_id, limit))


def verify_webhook(body: bytes | str, signature: str, secret: str, *, tolerance: float = TOLERANCE,
                   now: float | None = None) -> dict[str, Any]:
    """The delivered event, once its `Hutch-Signature` header (`t=<unix seconds>,v1=<hex>`) is
    checked: the HMAC-SHA256 of `"<t>." + body` under the webhook's secret, no older than
    `tolerance` seconds. Raises ValidationError (`bad_webhook_signature`) if it is not."""
    raw = body.encode() if isinstance(body, str) else body
    fields: dict[str, list[str]] = {}
    for part in signature.split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    try:
        stamp = int(fields["t"][0])
    except (KeyError, ValueError):
        raise ValidationError("the signature has no timestamp (t=)", code=SdkCode.BAD_WEBHOOK_SIGNATURE) from None
    expected = hmac.new(secret.encode(), b"%d." % stamp + raw, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected.encode(), given.encode()) for given in fields.get("v1", [])):
        raise ValidationError("the signature does not match the body and secret", code=SdkCode.BAD_WEBHOOK_SIGNATURE)
    if abs((now if now is not None else time.time()) - stamp) > tolerance:
        raise ValidationError(f"the signature is older than {tolerance:.0f} s", code=SdkCode.BAD_WEBHOOK_SIGNATURE)
    event: dict[str, Any] = json.loads(raw)
    return event


__all__ = ["Webhooks", "verify_webhook"]
