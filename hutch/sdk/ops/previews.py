"""A sandbox's preview ports: publishing a port of the box at the preview proxy, and its credentials."""

from __future__ import annotations

import json
from typing import Any

from hutch.sdk import routes
from hutch.sdk.codes import SdkCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.errors import ValidationError
from hutch.sdk.flow import Call, Flow, send
from hutch.sdk.routes import Route
from hutch.sdk.types import PreviewPort

PREVIEW_PORTS = range(1024, 65536)
RELAY_PORT = 3128  # the box's egress relay: never published


def check_preview_port(port: int) -> int:
    """Ports 1024-65535, not the box's relay: a ValidationError before any request."""
    if isinstance(port, bool) or not isinstance(port, int) or port not in PREVIEW_PORTS or port == RELAY_PORT:
        raise ValidationError(f"a preview port is an int in 1024-65535 other than {RELAY_PORT}, not {port!r}",
                              code=SdkCode.INVALID_PORT)
    return port


def preview_url(url_template: str, port: int) -> str:
    """A port's URL at the preview proxy, from the sandbox's `preview_url_template` (no request)."""
    return url_template.replace("{port}", str(check_preview_port(port)))


def _ports(cfg: ConnectionConfig, route: Route, sandbox_id: str, port: int | None = None,
           body: dict[str, Any] | None = None) -> Flow[Any]:
    """A preview-port route: the answer's JSON (None for a 204)."""
    where = {} if port is None else {"port": check_preview_port(port)}
    reply = yield from send(Call(*route.at(cfg.base_url, sandbox_id=sandbox_id, **where), cfg.headers(), json=body))
    return json.loads(reply.body) if reply.body else None


def publish(cfg: ConnectionConfig, sandbox_id: str, port: int, access: str | None) -> Flow[PreviewPort]:
    answer = yield from _ports(cfg, routes.PUBLISH_PORT, sandbox_id,
                               body={"port": check_preview_port(port), "access": access})
    return PreviewPort.from_json(answer)


def unpublish(cfg: ConnectionConfig, sandbox_id: str, port: int) -> Flow[None]:
    yield from _ports(cfg, routes.UNPUBLISH_PORT, sandbox_id, port)


def list_ports(cfg: ConnectionConfig, sandbox_id: str) -> Flow[list[PreviewPort]]:
    return [PreviewPort.from_json(d) for d in (yield from _ports(cfg, routes.LIST_PORTS, sandbox_id))]


def signed_url(cfg: ConnectionConfig, sandbox_id: str, port: int, expires_in_seconds: int) -> Flow[str]:
    answer = yield from _ports(cfg, routes.SIGN_PORT_URL, sandbox_id, port, {"expires_in_seconds": expires_in_seconds})
    return str(answer["url"])


def token(cfg: ConnectionConfig, sandbox_id: str, port: int) -> Flow[str]:
    return str((yield from _ports(cfg, routes.PORT_TOKEN, sandbox_id, port))["token"])


def rotate_token(cfg: ConnectionConfig, sandbox_id: str, port: int) -> Flow[None]:
    yield from _ports(cfg, routes.ROTATE_PORT_TOKEN, sandbox_id, port)
