"""A sandbox's control-plane calls (lifecycle, its logs, its secret bindings) and its data plane's access."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx

from hutch.sdk import routes
from hutch.sdk.codes import ServerCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import AuthenticationError, NotFoundError
from hutch.sdk.flow import Call, Flow, Reply, send
from hutch.sdk.types import AuditPage, NetworkConfig, NetworkLogPage, SandboxInfo, SecretBinding

# A command's or a watch's stream carries a keep-alive every 10 s, so a minute of silence means a dead stream.
STREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=60.0, write=60.0, pool=10.0)


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # "leave as it is", where None means "clear"


@dataclass
class DataPlane:
    """Where a sandbox's commands and files go, and the token they carry. The token rotates
    when the sandbox resumes; `send_data` then fetches the new one through the control plane."""

    url: str
    token: str
    sandbox_id: str
    cfg: ConnectionConfig

    def headers(self) -> dict[str, str]:
        return {"X-Access-Token": self.token, **self.cfg.actor_headers()}


def send_data(dp: DataPlane, make: Callable[[], Call]) -> Flow[Reply]:
    """A data-plane request. If the token was rotated (the box resumed since), reconnect once for
    the new one and send again."""
    try:
        return (yield from send(make()))
    except AuthenticationError as e:
        if e.code != ServerCode.INVALID_ACCESS_TOKEN:
            raise
    yield from refresh_token(dp)
    return (yield from send(make()))


def refresh_token(dp: DataPlane) -> Flow[None]:
    """Take the sandbox's current data-plane token (connect resumes it if it is paused)."""
    _info, fresh = yield from connect(dp.cfg, dp.sandbox_id)
    dp.url, dp.token = fresh.url, fresh.token


def network_body(network: NetworkConfig | dict[str, Any] | None) -> dict[str, Any] | None:
    if network is None or isinstance(network, dict):
        return network
    return {"allow_out": list(network.allow_out), "deny_out": list(network.deny_out)}


def page_params(limit: int, before: int | None) -> dict[str, str]:
    """A log page's query: how many entries, older than which."""
    return {"limit": str(limit), **({"before": str(before)} if before is not None else {})}


def _access(cfg: ConnectionConfig, reply: Reply) -> tuple[SandboxInfo, DataPlane]:
    d = json.loads(reply.body)
    return SandboxInfo.from_json(d), DataPlane(d["data_plane_url"], d["access_token"], d["id"], cfg)


def create(cfg: ConnectionConfig, name: str, *, from_template: str | None, timeout_seconds: int | None,
           auto_delete_seconds: int | None, metadata: dict[str, str] | None, env_vars: dict[str, str] | None,
           network: NetworkConfig | None, secrets: dict[str, str] | None,
           preview_access: str | None, from_snapshot: str | None = None,
           volumes: dict[str, Any] | None = None) -> Flow[tuple[SandboxInfo, DataPlane]]:
    """Answers once the box is ready for commands (the server waits for its template's ready_cmd)."""
    body = {"name": name, "from_template": from_template, "timeout_seconds": timeout_seconds,
            "auto_delete_seconds": auto_delete_seconds, "metadata": metadata, "env_vars": env_vars,
            "network": network_body(network), "secrets": secrets, "preview_access": preview_access,
            "from_snapshot": from_snapshot, "volumes": volumes}
    reply = yield from send(Call(*routes.CREATE_SANDBOX.at(cfg.base_url), cfg.headers(),
                                 json={k: v for k, v in body.items() if v is not None}))
    return _access(cfg, reply)


def connect(cfg: ConnectionConfig, sandbox_id: str) -> Flow[tuple[SandboxInfo, DataPlane]]:
    """The sandbox and a fresh data-plane token; the server resumes a paused box first."""
    reply = yield from send(Call(*routes.CONNECT_SANDBOX.at(cfg.base_url, sandbox_id=sandbox_id), cfg.headers()))
    return _access(cfg, reply)


def pause(cfg: ConnectionConfig, sandbox_id: str, memory: bool = True) -> Flow[None]:
    yield from send(Call(*routes.PAUSE_SANDBOX.at(cfg.base_url, sandbox_id=sandbox_id), cfg.headers(),
                         params={} if memory else {"memory": "false"}))


def resume(dp: DataPlane) -> Flow[SandboxInfo]:
    """Resume (a no-op when active) and take the rotated token."""
    reply = yield from send(Call(*routes.RESUME_SANDBOX.at(dp.cfg.base_url, sandbox_id=dp.sandbox_id),
                                 dp.cfg.headers()))
    info, fresh = _access(dp.cfg, reply)
    dp.url, dp.token = fresh.url, fresh.token
    return info


def get_info(cfg: ConnectionConfig, sandbox_id: str) -> Flow[SandboxInfo]:
    reply = yield from send(Call(*routes.GET_SANDBOX.at(cfg.base_url, sandbox_id=sandbox_id), cfg.headers()))
    return SandboxInfo.from_json(json.loads(reply.body))


def list_sandboxes(cfg: ConnectionConfig, metadata: dict[str, str] | None,
                   status: str | None) -> Flow[list[SandboxInfo]]:
    params = {}
    if metadata:
        params["metadata"] = urlencode(metadata)
    if status:
        params["status"] = status
    reply = yield from send(Call(*routes.LIST_SANDBOXES.at(cfg.base_url), cfg.headers(), params=params))
    return [SandboxInfo.from_json(d) for d in json.loads(reply.body)]


def update(cfg: ConnectionConfig, sandbox_id: str, *, metadata: Any, timeout_seconds: Any, auto_delete_seconds: Any,
           network: Any) -> Flow[SandboxInfo]:
    """Change what is not UNSET."""
    changes = {"metadata": metadata, "timeout_seconds": timeout_seconds, "auto_delete_seconds": auto_delete_seconds,
               "network": network if network is UNSET else network_body(network)}
    body = {k: v for k, v in changes.items() if v is not UNSET}
    reply = yield from send(Call(*routes.UPDATE_SANDBOX.at(cfg.base_url, sandbox_id=sandbox_id), cfg.headers(), json=body))
    return SandboxInfo.from_json(json.loads(reply.body))


def network_log(cfg: ConnectionConfig, sandbox_id: str, limit: int, before: int | None) -> Flow[NetworkLogPage]:
    reply = yield from send(Call(*routes.NETWORK_LOG.at(cfg.base_url, sandbox_id=sandbox_id), cfg.headers(),
                                 params=page_params(limit, before)))
    return NetworkLogPage.from_json(json.loads(reply.body))


def audit_log(cfg: ConnectionConfig, sandbox_id: str, limit: int, before: int | None) -> Flow[AuditPage]:
    reply = yield from send(Call(*routes.AUDIT_LOG.at(cfg.base_url, sandbox_id=sandbox_id), cfg.headers(),
                                 params=page_params(limit, before)))
    return AuditPage.from_json(json.loads(reply.body))


def kill(cfg: ConnectionConfig, sandbox_id: str) -> Flow[None]:
    """Idempotent: a sandbox that is already gone is not an error."""
    try:
        yield from send(Call(*routes.KILL_SANDBOX.at(cfg.base_url, sandbox_id=sandbox_id), cfg.headers()))
    except NotFoundError:
        pass


_BINDING_ROUTES = {"PUT": routes.ATTACH_SECRET, "DELETE": routes.DETACH_SECRET}


def secret_bindings(cfg: ConnectionConfig, sandbox_id: str, method: str = "GET", env: str | None = None,
                    secret: str | None = None) -> Flow[list[SecretBinding]]:
    """A sandbox's bindings: listed (GET), one attached (PUT) or detached (DELETE) first."""
    route = _BINDING_ROUTES[method] if env else routes.LIST_BINDINGS
    reply = yield from send(Call(*route.at(cfg.base_url, sandbox_id=sandbox_id, env=env or ""), cfg.headers(),
                                 json={"secret": secret} if secret is not None else None))
    return [SecretBinding.from_json(b) for b in json.loads(reply.body)]
