"""Secrets (credentials the server swaps into a box's requests) and the providers they can name."""

from __future__ import annotations

import json

from hutch.sdk import routes
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.flow import Call, Flow, send
from hutch.sdk.ops.sandboxes import page_params
from hutch.sdk.types import ProviderInfo, SecretAuditPage, SecretAuth, SecretInfo


def create_secret(cfg: ConnectionConfig, name: str, value: str, provider: str | None,
                  allowed_hosts: list[str] | None, auth: SecretAuth | dict[str, str] | None) -> Flow[SecretInfo]:
    if isinstance(auth, SecretAuth):
        auth = {"header": auth.header, "format": auth.format}
    body = {"name": name, "value": value, "provider": provider, "allowed_hosts": allowed_hosts, "auth": auth}
    reply = yield from send(Call(*routes.CREATE_SECRET.at(cfg.base_url), cfg.headers(),
                                 json={k: v for k, v in body.items() if v is not None}))
    return SecretInfo.from_json(json.loads(reply.body))


def get_secret(cfg: ConnectionConfig, name: str) -> Flow[SecretInfo]:
    reply = yield from send(Call(*routes.GET_SECRET.at(cfg.base_url, name=name), cfg.headers()))
    return SecretInfo.from_json(json.loads(reply.body))


def list_secrets(cfg: ConnectionConfig) -> Flow[list[SecretInfo]]:
    reply = yield from send(Call(*routes.LIST_SECRETS.at(cfg.base_url), cfg.headers()))
    return [SecretInfo.from_json(d) for d in json.loads(reply.body)]


def rotate_secret(cfg: ConnectionConfig, name: str, value: str) -> Flow[SecretInfo]:
    reply = yield from send(Call(*routes.ROTATE_SECRET.at(cfg.base_url, name=name), cfg.headers(),
                                 json={"value": value}))
    return SecretInfo.from_json(json.loads(reply.body))


def delete_secret(cfg: ConnectionConfig, name: str) -> Flow[None]:
    yield from send(Call(*routes.DELETE_SECRET.at(cfg.base_url, name=name), cfg.headers()))


def secret_audit(cfg: ConnectionConfig, name: str, limit: int, before: int | None,
                 sandbox_id: str | None) -> Flow[SecretAuditPage]:
    params = {**page_params(limit, before), **({"sandbox_id": sandbox_id} if sandbox_id else {})}
    reply = yield from send(Call(*routes.SECRET_AUDIT.at(cfg.base_url, name=name), cfg.headers(), params=params))
    return SecretAuditPage.from_json(json.loads(reply.body))


def list_providers(cfg: ConnectionConfig) -> Flow[list[ProviderInfo]]:
    reply = yield from send(Call(*routes.LIST_PROVIDERS.at(cfg.base_url), cfg.headers()))
    return [ProviderInfo.from_json(d) for d in json.loads(reply.body)]
