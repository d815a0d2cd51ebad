"""A box's other ports on envd's URL: a request whose `E2b-Sandbox-Port` is not envd's goes to that
port inside the box (the code interpreter's 49999, say), as E2B's proxy sends it.

The token is envd's own check (`sandbox_of`), taken from `X-Access-Token` or, as the code
interpreter's client sends it on its context calls, `E2B-Traffic-Access-Token` (hutch's traffic
token is the box's access token). A wrong one is envd's 401. The request goes through
hutch.services.boxport (the agent's tunnel, h11 framing, a bounded head, the answer streamed);
hop-by-hop headers and cookies stay behind, and on envd's URL the answer is sandboxed (CSP), since
it is served from hutch's own origin; at the port's own E2B host name (`<port>-<id>.<domain>`) it is
an origin of its own, and its pages run (noVNC's). An answer the box cuts short ends the client's response unfinished, so
the client sees a broken stream, not a short one, and only once the store says whether the box is
going (a kill): E2B's SDK then asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from hutch.e2b.common import StateGetter
from hutch.e2b.envd import ENVD_PORT, HOST_FORM, SandboxGone, sandbox_of
from hutch.errors import ApiError, Code
from hutch.node.box import INTERPRETER_PORT
from hutch.services import boxport
from hutch.services.uploads import MAX_JSON_BODY, capped_body
from hutch.store import SandboxRecord, SandboxStatus

if TYPE_CHECKING:
    from hutch.server.state import State

PORT_HEADER = b"e2b-sandbox-port"
TRAFFIC_HEADER = "e2b-traffic-access-token"
# what never goes on to the box: framing and hop-by-hop (h11 frames anew), hutch's and E2B's own
DROPPED = frozenset({b"host", b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"te",
                     b"trailer", b"upgrade", b"proxy-connection", b"proxy-authorization", b"x-access-token",
                     b"e2b-traffic-access-token", b"e2b-sandbox-id", b"e2b-sandbox-port", b"authorization",
                     b"x-api-key", b"cookie"})
ANSWER_DROPPED = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"trailer",
                            b"upgrade", b"set-cookie", b"content-security-policy", b"x-content-type-options"})
# On envd's URL the box's answer comes from hutch's API origin: a page in it never runs as that
# origin's. At its E2B host name (`<port>-<id>.<domain>`) the port is an origin of its own, as at
# E2B: its pages run (noVNC's, say), with nothing of hutch's to reach.
BOX_ANSWER = {"content-security-policy": "sandbox", "x-content-type-options": "nosniff"}
HOST_FORM_ANSWER = {"x-content-type-options": "nosniff"}


def port_of(scope: Scope) -> int | None:
    """The port a request names, when it is not envd's; None for envd's (or none named)."""
    for name, value in scope.get("headers", ()):
        if name == PORT_HEADER:
            return None if value.decode("latin-1").strip() == ENVD_PORT else _port_number(value)
    return None


def _port_number(value: bytes) -> int:
    text = value.decode("latin-1").strip()
    return int(text) if text.isascii() and text.isdigit() and 0 < int(text) < 65536 else 0  # 0: never open


class ByPort:
    """envd's app, or the port forwarder for a request naming another port (`sockets` for a
    WebSocket: hutch.e2b.wsports)."""

    def __init__(self, envd: ASGIApp, other: ASGIApp, sockets: ASGIApp) -> None:
        self.envd, self.other, self.sockets = envd, other, sockets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and port_of(scope) is not None:
            return await self.other(scope, receive, send)
        if scope["type"] == "websocket" and port_of(scope) is not None:
            return await self.sockets(scope, receive, send)
        await self.envd(scope, receive, send)


async def forward(get_state: StateGetter, request: Request) -> Response:
    port = port_of(request.scope) or 0
    st, rec, anyone = opened(get_state, request, port)
    if rec.status == SandboxStatus.FAILED:
        raise SandboxGone(rec.id)
    if not port:
        raise SandboxGone(rec.id, boxport.NOT_OPEN)
    # read whole, and so bounded here: BodyLimit lets through what names an upload's path (`…/files`)
    declared = request.headers.get("content-length")
    length = int(declared) if declared and declared.isascii() and declared.isdigit() else None
    body = b"".join([chunk async for chunk in capped_body(request.stream(), MAX_JSON_BODY, length,
                                                          "requests to a sandbox's port")])
    try:
        answer = await boxport.exchange(st, rec, port, request.method, target(request.scope),
                                        [(k, v) for k, v in request.headers.raw if k.lower() not in DROPPED], body,
                                        anyone=anyone)
    except boxport.PortUnavailable as e:
        raise SandboxGone(rec.id, str(e)) from None
    response = StreamingResponse(answer.body, status_code=answer.status)
    # raw: a header the box repeats (Vary, Link) keeps every value
    ours = HOST_FORM_ANSWER if request.scope.get(HOST_FORM) else BOX_ANSWER
    response.raw_headers = [(k, v) for k, v in answer.headers if k not in ANSWER_DROPPED] + \
        [(k.encode(), v.encode()) for k, v in ours.items()]
    return response


def opened(get_state: StateGetter, request: HTTPConnection, port: int) -> tuple[State, SandboxRecord, bool]:
    """The box the request may reach: at its E2B host name (hosts.py), a box made with
    allowPublicTraffic answers anyone on its ports, as E2B's does, but for its code interpreter's
    unless the box was made with `secure: false` (e2b 1.x's: its interpreter client sends no
    token); otherwise its token is checked (sandbox_of: the same 401 for a wrong token and for a
    box that does not exist, or is not public). Only a caller with the token wakes a paused box
    whose auto-resume was not asked for. The flag: whether the caller is anyone (no token)."""
    token = request.headers.get("x-access-token") or request.headers.get(TRAFFIC_HEADER)
    if request.scope.get(HOST_FORM):
        st = get_state()
        rec = st.store.get_sandbox(request.headers.get("e2b-sandbox-id") or "")  # (never a deleted one)
        if rec is not None and rec.public_traffic and (port != INTERPRETER_PORT or rec.secure is False):
            known = bool(token) and st.signer.verify(token or "", rec.id, rec.token_generation)
            if not known and rec.auto_resume is not True and rec.status in (SandboxStatus.PAUSING,
                                                                                SandboxStatus.PAUSED):
                raise ApiError(Code.SANDBOX_PAUSED, f"sandbox {rec.id} is paused: a request without its token "
                                                    "wakes it only when it was made with auto-resume")
            return st, rec, not known
    st, rec = sandbox_of(get_state, request, token)
    return st, rec, False


def target(scope: Scope) -> bytes:
    """The path below envd's prefix as the client sent it (not decoded), with its query."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode("latin-1")
    prefix = scope.get("root_path", "").encode("latin-1")
    path = raw[len(prefix):] if raw.startswith(prefix) else raw
    query: bytes = scope.get("query_string", b"")
    return (path if path.startswith(b"/") else b"/" + path) + (b"?" + query if query else b"")
