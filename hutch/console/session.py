"""Who is at the browser: the session cookie an API key was exchanged for, and the checks every
change must pass (the request's Origin is the console's own, and it carries the session's CSRF token).

The cookie is a random value the store keeps only as a hash; it is HttpOnly (no script reads it),
SameSite=Strict (no other site's page sends it), scoped to /console, Secure when the console is
served over HTTPS, and it expires; signing out deletes the session server-side. The API key is
never stored in the browser: it is read once from the sign-in form.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response

from hutch.errors import ApiError, Code
from hutch.server.state import State
from hutch.store import ConsoleSession

COOKIE = "hutch_console"
PATH = "/console"
LIFETIME = 12 * 3600  # a working day; then the key is asked for again
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"
MAX_FORM = 64 * 2**10  # the console's forms are a key, a token and a few words


class SignedOut(Exception):
    """No live session: pages send the browser to the sign-in form."""


@dataclass(frozen=True)
class Session:
    raw: str  # the cookie's value, to close it
    info: ConsoleSession

    @property
    def team_id(self) -> str:
        return self.info.team_id

    def actor(self, conn: HTTPConnection) -> str:
        """Who the audit log says acted: the address, the console, and the key that signed in."""
        address = conn.client.host if conn.client else "-"
        return f"{address} console {self.info.key_prefix}"  # both ours: the key prefix is one the store made


def current(st: State, conn: HTTPConnection) -> Session:
    raw = conn.cookies.get(COOKIE)
    found = st.store.console_session(raw) if raw and len(raw) <= 128 else None
    if raw is None or found is None:
        raise SignedOut
    return Session(raw, found)


def set_cookie(response: Response, raw: str, secure: bool) -> None:
    response.set_cookie(COOKIE, raw, max_age=LIFETIME, path=PATH, httponly=True, samesite="strict", secure=secure)


def clear_cookie(response: Response, secure: bool) -> None:
    response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict", secure=secure)


def own_origins(st: State, conn: HTTPConnection) -> set[str]:
    """The console's origin as this request reached it, and as the server's public URL names it
    (behind a proxy that ends TLS, the browser's Origin is https:// where the request is http://)."""
    scheme = "https" if conn.url.scheme in ("https", "wss") else "http"
    public = urlsplit(st.config.base_url)
    return {f"{scheme}://{conn.headers.get('host', '')}", f"{public.scheme}://{public.netloc}"}


def check_origin(st: State, conn: HTTPConnection) -> None:
    """A change must come from the console's own pages: browsers send Origin with every POST and
    WebSocket, and another site cannot forge it. No Origin (an old browser, a script) is refused too."""
    origin = conn.headers.get("origin")
    if origin is None or origin.rstrip("/") not in own_origins(st, conn):
        raise ApiError(Code.FORBIDDEN, "this change must come from the console's own page (Origin)")


def check_csrf(st: State, session: Session, conn: HTTPConnection, sent: str | None) -> None:
    """The Origin, and the session's token: in the X-CSRF-Token header (htmx, fetch) or `sent`
    (a form field, a WebSocket's query), compared in constant time."""
    check_origin(st, conn)
    token = conn.headers.get(CSRF_HEADER) or sent or ""
    if not hmac.compare_digest(token.encode(), session.info.csrf.encode()):
        raise ApiError(Code.FORBIDDEN, "the console's CSRF token is missing or wrong")


async def form(request: Request) -> dict[str, str]:
    """A urlencoded form body, bounded (the console's forms are small)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise ApiError(Code.PAYLOAD_TOO_LARGE, f"console forms are limited to {MAX_FORM} bytes")
    try:
        return dict(parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=32))
    except (UnicodeDecodeError, ValueError):
        raise ApiError(Code.INVALID_REQUEST, "the form is not urlencoded text") from None


async def changing(st: State, request: Request) -> tuple[Session, dict[str, str]]:
    """The session of a request that changes something, once its Origin and token are checked."""
    session = current(st, request)
    fields = await form(request) if request.headers.get("content-type", "").startswith(
        "application/x-www-form-urlencoded") else {}
    check_csrf(st, session, request, fields.get(CSRF_FIELD))
    return session, fields


def secure(st: State) -> bool:
    return st.config.base_url.startswith("https://")
