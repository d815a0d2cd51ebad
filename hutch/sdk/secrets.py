"""`Secret` and `AsyncSecret`: credentials stored once with the server, never seen by a box.

    Secret.create(name="anthropic-prod", value=key, provider="anthropic")
    Sandbox.create(name="agent", secrets={"ANTHROPIC_API_KEY": "anthropic-prod"})

Inside the box the variable holds a stand-in token; the server's egress proxy swaps it for the
value only on requests to the secret's allowed hosts. What each call sends lives once, in `ops`.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from hutch.sdk import ops
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.ops import ProviderInfo, SecretAuditPage, SecretAuth, SecretInfo
from hutch.sdk.sandbox import _once_async, _once_sync


def _create_body(name: str, value: str, provider: str | None, allowed_hosts: list[str] | None,
                 auth: SecretAuth | dict[str, str] | None) -> dict[str, Any]:
    if isinstance(auth, SecretAuth):
        auth = {"header": auth.header, "format": auth.format}
    body = {"name": name, "value": value, "provider": provider, "allowed_hosts": allowed_hosts, "auth": auth}
    return {k: v for k, v in body.items() if v is not None}


class _SecretBase:
    def __init__(self, info: SecretInfo, cfg: ConnectionConfig) -> None:
        self._info, self._cfg = info, cfg

    @property
    def name(self) -> str:
        return self._info.name

    @property
    def provider(self) -> str | None:
        return self._info.provider

    @property
    def allowed_hosts(self) -> list[str]:
        return list(self._info.allowed_hosts)

    @property
    def auth(self) -> SecretAuth:
        return self._info.auth

    @property
    def version(self) -> int:
        return self._info.version

    @property
    def info(self) -> SecretInfo:
        return self._info

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, provider={self.provider!r}, hosts={self.allowed_hosts!r})"


class Secret(_SecretBase):
    """A stored credential (its value is never returned). Blocking calls."""

    @classmethod
    def create(cls, name: str, value: str, *, provider: str | None = None, allowed_hosts: list[str] | None = None,
               auth: SecretAuth | dict[str, str] | None = None, api_key: str | None = None,
               base_url: str | None = None) -> Secret:
        """`provider` ("anthropic", "openai", ...: see `Provider.list()`) sets the auth scheme and
        hosts; `allowed_hosts` and `auth` set or override them."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return cls(_once_sync(cfg, ops.create_secret(cfg, _create_body(name, value, provider, allowed_hosts, auth))),
                   cfg)

    @classmethod
    def get(cls, name: str, *, api_key: str | None = None, base_url: str | None = None) -> Secret:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return cls(_once_sync(cfg, ops.get_secret(cfg, name)), cfg)

    @classmethod
    def list(cls, *, api_key: str | None = None, base_url: str | None = None) -> list[Secret]:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return [cls(info, cfg) for info in _once_sync(cfg, ops.list_secrets(cfg))]

    @classmethod
    def delete_by_name(cls, name: str, *, api_key: str | None = None, base_url: str | None = None) -> None:
        """Boxes bound to it keep a stand-in that is never swapped again (their binding: revoked)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        _once_sync(cfg, ops.delete_secret(cfg, name))

    @classmethod
    def audit_by_name(cls, name: str, *, limit: int = 100, before: int | None = None, sandbox_id: str | None = None,
                      api_key: str | None = None, base_url: str | None = None) -> SecretAuditPage:
        """The uses of the secret of that name, a deleted one's too."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        page: SecretAuditPage = _once_sync(cfg, ops.secret_audit(cfg, name, limit, before, sandbox_id))
        return page

    def rotate(self, value: str) -> None:
        """A new value, used from the next request out of any box."""
        self._info = _once_sync(self._cfg, ops.rotate_secret(self._cfg, self.name, value))

    def delete(self) -> None:
        _once_sync(self._cfg, ops.delete_secret(self._cfg, self.name))

    def audit(self, *, limit: int = 100, before: int | None = None, sandbox_id: str | None = None) -> SecretAuditPage:
        """Every request it was swapped into, newest first: when, which box, host, method, path, status."""
        page: SecretAuditPage = _once_sync(self._cfg, ops.secret_audit(self._cfg, self.name, limit, before, sandbox_id))
        return page


class AsyncSecret(_SecretBase):
    """`Secret`, for asyncio code."""

    @classmethod
    async def create(cls, name: str, value: str, *, provider: str | None = None,
                     allowed_hosts: list[str] | None = None, auth: SecretAuth | dict[str, str] | None = None,
                     api_key: str | None = None, base_url: str | None = None) -> AsyncSecret:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        body = _create_body(name, value, provider, allowed_hosts, auth)
        return cls(await _once_async(cfg, ops.create_secret(cfg, body)), cfg)

    @classmethod
    async def get(cls, name: str, *, api_key: str | None = None, base_url: str | None = None) -> AsyncSecret:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return cls(await _once_async(cfg, ops.get_secret(cfg, name)), cfg)

    @classmethod
    async def list(cls, *, api_key: str | None = None, base_url: str | None = None) -> list[AsyncSecret]:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return [cls(info, cfg) for info in await _once_async(cfg, ops.list_secrets(cfg))]

    @classmethod
    async def delete_by_name(cls, name: str, *, api_key: str | None = None, base_url: str | None = None) -> None:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        await _once_async(cfg, ops.delete_secret(cfg, name))

    @classmethod
    async def audit_by_name(cls, name: str, *, limit: int = 100, before: int | None = None,
                            sandbox_id: str | None = None, api_key: str | None = None,
                            base_url: str | None = None) -> SecretAuditPage:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        page: SecretAuditPage = await _once_async(cfg, ops.secret_audit(cfg, name, limit, before, sandbox_id))
        return page

    async def rotate(self, value: str) -> None:
        self._info = await _once_async(self._cfg, ops.rotate_secret(self._cfg, self.name, value))

    async def delete(self) -> None:
        await _once_async(self._cfg, ops.delete_secret(self._cfg, self.name))

    async def audit(self, *, limit: int = 100, before: int | None = None,
                    sandbox_id: str | None = None) -> SecretAuditPage:
        page: SecretAuditPage = await _once_async(self._cfg, ops.secret_audit(self._cfg, self.name, limit, before,
                                                                              sandbox_id))
        return page


@dataclass
class Provider(ProviderInfo):
    """A service a secret can name as its provider: its auth scheme, hosts and usual env var."""

    @classmethod
    def list(cls, *, api_key: str | None = None, base_url: str | None = None) -> builtins.list[Provider]:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return [cls(**vars(p)) for p in _once_sync(cfg, ops.list_providers(cfg))]

    @classmethod
    async def list_async(cls, *, api_key: str | None = None, base_url: str | None = None) -> builtins.list[Provider]:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return [cls(**vars(p)) for p in await _once_async(cfg, ops.list_providers(cfg))]
