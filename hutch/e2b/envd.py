"""The envd facade (E2B_SANDBOX_URL = <hutch>/e2b/envd, or `49983-<id>.<E2B domain>`: hosts.py):
requests name their sandbox with the `E2b-Sandbox-Id` header (or, without it, by the token itself)
and carry its hutch data-plane token in `X-Access-Token`.

Routes: `GET /health`, `GET|POST /files`, `POST /process.Process/<method>` and
`POST /filesystem.Filesystem/<method>`. An unknown, deleted or failed sandbox gets E2B's proxy
answer (502 `{"sandboxId", "message": "The sandbox was not found", "code": 502}`), which the SDK
reads as "not running". The user is the Basic-auth name ("root" or "user"; none: the box's user).
Only port 49983 (envd) is served here; a request naming another `E2b-Sandbox-Port` goes to
that port inside the box (ports.py).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection, Request

from hutch.e2b import rest
from hutch.e2b.common import StateGetter
from hutch.e2b.connect import invalid, parse_json
from hutch.errors import ApiError, Code
from hutch.server.auth import authorize_box
from hutch.services import audit
from hutch.services.models import User
from hutch.services.tokens import sandbox_named
from hutch.store import SandboxRecord, SandboxStatus

ENVD_PORT = "49983"
HOST_FORM = "hutch.e2b.host_form"  # in a request's scope: it came through E2B's host form (hosts.py)

if TYPE_CHECKING:
    from hutch.server.state import State


class SandboxGone(Exception):
    status = 502  # E2B's proxy's, not a catalogue code's: the SDK reads it as "not running"

    def __init__(self, sandbox_id: str, message: str = "The sandbox was not found") -> None:
        super().__init__(message)
        self.sandbox_id, self.message = sandbox_id, message

    def body(self) -> dict[str, Any]:
        return rest.error_body(self.status, self.message, sandboxId=self.sandbox_id)


@dataclass
class Call:
    """One envd request: the server, the box it names, as whom, and who asked (for the audit)."""

    st: State
    rec: SandboxRecord
    user: User | None
    who: str

    @staticmethod
    async def unary_message(request: Request) -> dict[str, Any]:
        """The body, bounded by hutch's JSON limit (BodyLimit; a 413 becomes resource_exhausted)."""
        return parse_json(await request.body())


def sandbox_of(get_state: StateGetter, request: HTTPConnection, token: str | None = None) -> tuple[State, SandboxRecord]:
    """The sandbox the request names, opened by its token (hutch's `authorize_box`; X-Access-Token
    unless `token` is given): a wrong or missing token is the same 401 whether or not the box
    exists; a killed box, to a caller whose token was good for it, is E2B's proxy answer."""
    st = get_state()
    token = token or request.headers.get("x-access-token")
    # E2B's SDKs before 2.25.1 send no sandbox id after `connect`: the token names its box (tokens.py)
    sandbox_id = request.headers.get("e2b-sandbox-id") or sandbox_named(token) or ""
    try:
        return st, authorize_box(st, sandbox_id, token)
    except ApiError as e:
        if e.code == Code.NOT_FOUND:
            raise SandboxGone(sandbox_id[:64]) from None
        raise


def check_box(rec: SandboxRecord, request: Request) -> None:
    """After its token is checked: a failed box is gone, and only envd's port is served."""
    if rec.status == SandboxStatus.FAILED:
        raise SandboxGone(rec.id)
    if (request.headers.get("e2b-sandbox-port") or ENVD_PORT) != ENVD_PORT:
        raise SandboxGone(rec.id, f"The sandbox is running but port is not open: only {ENVD_PORT} is served")


def basic_user(request: Request) -> User | None:
    """The user named in `Authorization: Basic base64("<user>:")`, or None."""
    header = request.headers.get("authorization") or ""
    if header[:6].lower() != "basic ":
        return None
    try:
        name = base64.b64decode(header[6:].strip(), validate=True).decode().split(":", 1)[0]
    except (binascii.Error, ValueError):  # ValueError: non-ASCII text (and bad UTF-8)
        raise invalid("the Authorization header is not valid Basic auth") from None
    return check_user(name)


def check_user(name: str | None) -> User | None:
    if not name:
        return None
    if name == "root":
        return "root"
    if name == "user":
        return "user"
    raise invalid(f"user '{name[:64]}' does not exist in the sandbox (root or user)")


def call_of(get_state: StateGetter, request: Request, user: User | None) -> Call:
    st, rec = sandbox_of(get_state, request)
    check_box(rec, request)
    return Call(st, rec, user, audit.actor(request))
