"""`Secret` and `AsyncSecret`: credentials stored once with the server, never seen by a box.

    Secret.create(name="anthropic-prod", value=key, provider="anthropic")
    Sandbox.create(name="agent", secrets={"ANTHROPIC_API_KEY": "anthropic-prod"})

Inside the box the variable holds a stand-in token; the server's egress proxy swaps it for the
value only on requests to the secret's allowed hosts. Every call is written once, on the shared
base (see `hutch.sdk.front`); what it sends lives in `hutch.sdk.ops.secrets`.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from hutch.sdk.config import ConnectionConfig
from hutch.sdk.flow import Flow, mapped
from hutch.sdk.front import AsyncFront, Job, SyncFront, call, classcall, making, making_each
from hutch.sdk.ops import secrets
from hutch.sdk.session import Session, run_awaited, run_blocking
from hutch.sdk.types import ProviderInfo, SecretAuditPage, SecretAuth, SecretInfo

SecretT = TypeVar("SecretT", bound="_SecretBase[Any]")


class _SecretBase(Generic[SecretT]):
    """Both fronts' calls, and a snapshot of the secret (its value is never returned)."""

    def __init__(self, info: SecretInfo, session: Session) -> None:
        self._info, self._session = info, session

    @property
    def name(self) -> str:
        return self._info.name

    @property
    def provider(self) -> str | None:
        return self._info.provider

    @property
    def allowed_hosts(self) -> builtins.list[str]:
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

    # --- the class's own calls --------------------------------------------------------------------

    @classcall
    def create(cls: type[SecretT], name: str, value: str, *, provider: str | None = None,
               allowed_hosts: builtins.list[str] | None = None, auth: SecretAuth | dict[str, str] | None = None,
               api_key: str | None = None, base_url: str | None = None) -> Job[SecretT]:
        """`provider` ("anthropic", "openai", ...: see `Provider.list()`) sets the auth scheme and
        hosts; `allowed_hosts` and `auth` set or override them."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making(session, secrets.create_secret(session.cfg, name, value, provider, allowed_hosts, auth), cls)

    @classcall
    def get(cls: type[SecretT], name: str, *, api_key: str | None = None,
            base_url: str | None = None) -> Job[SecretT]:
        """A secret by name."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making(session, secrets.get_secret(session.cfg, name), cls)

    @classcall
    def list(cls: type[SecretT], *, api_key: str | None = None,
             base_url: str | None = None) -> Job[builtins.list[SecretT]]:
        """The team's secrets."""
        session = Session(ConnectionConfig.resolve(api_key, base_url))
        return making_each(session, secrets.list_secrets(session.cfg), cls)

    @classcall
    def delete_by_name(cls, name: str, *, api_key: str | None = None, base_url: str | None = None) -> Job[None]:
        """Boxes bound to it keep a stand-in that is never swapped again (their binding: revoked)."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), secrets.delete_secret(cfg, name))

    @classcall
    def audit_by_name(cls, name: str, *, limit: int = 100, before: int | None = None, sandbox_id: str | None = None,
                      api_key: str | None = None, base_url: str | None = None) -> Job[SecretAuditPage]:
        """The uses of the secret of that name, a deleted one's too."""
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), secrets.secret_audit(cfg, name, limit, before, sandbox_id))

    # --- the secret's -----------------------------------------------------------------------------

    @call
    def rotate(self, value: str) -> Flow[None]:
        """A new value, used from the next request out of any box."""
        self._info = yield from secrets.rotate_secret(self._session.cfg, self.name, value)

    @call
    def delete(self) -> Flow[None]:
        """As `delete_by_name`."""
        return secrets.delete_secret(self._session.cfg, self.name)

    @call
    def audit(self, *, limit: int = 100, before: int | None = None,
              sandbox_id: str | None = None) -> Flow[SecretAuditPage]:
        """Every request it was swapped into, newest first: when, which box, host, method, path, status."""
        return secrets.secret_audit(self._session.cfg, self.name, limit, before, sandbox_id)


class Secret(_SecretBase["Secret"], SyncFront):
    """A stored credential (its value is never returned). Blocking calls."""


class AsyncSecret(_SecretBase["AsyncSecret"], AsyncFront):
    """`Secret`, for asyncio code."""


@dataclass
class Provider(ProviderInfo):
    """A service a secret can name as its provider: its auth scheme, hosts and usual env var."""

    @classmethod
    def list(cls, *, api_key: str | None = None, base_url: str | None = None) -> builtins.list[Provider]:
        """Every provider the server knows."""
        return run_blocking(*cls._listing(api_key, base_url))

    @classmethod
    async def list_async(cls, *, api_key: str | None = None, base_url: str | None = None) -> builtins.list[Provider]:
        """As `list`, awaited."""
        return await run_awaited(*cls._listing(api_key, base_url))

    @classmethod
    def _listing(cls, api_key: str | None, base_url: str | None) -> Job[builtins.list[Provider]]:
        cfg = ConnectionConfig.resolve(api_key, base_url)
        return Job(Session(cfg), mapped(secrets.list_providers(cfg), lambda found: [cls(**vars(p)) for p in found]))
