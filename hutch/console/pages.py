"""What every console page shares: the server's state, the Jinja templates and their filters, and
rendering a page or a part of one (htmx swaps parts in) with the session's CSRF token in it."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends
from pydantic import ValidationError
from starlette.requests import HTTPConnection, Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from hutch.console.session import Session
from hutch.errors import ApiError, Code
from hutch.server.state import State

HERE = Path(__file__).parent
TEMPLATES = Jinja2Templates(directory=HERE / "templates")  # .html: autoescaped


# What a page may do: scripts only from the console's own static files (what a box puts in a file
# name or a command is text, and could not run even if it were markup), no framing (no one
# else's page can lay the Kill button under a click), forms and fetches only to the console.
# xterm.js and htmx add <style> elements: inline styles are allowed, inline scripts are not.
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def state(conn: HTTPConnection) -> State:
    st: State = conn.app.state.get_state()
    return st


StateDep = Annotated[State, Depends(state)]


def age(when: datetime | float, now: float | None = None) -> str:
    """How long ago, as a person says it: 42 s, 5 min, 3 h, 2 d."""
    seconds = max((now or time.time()) - (when.timestamp() if isinstance(when, datetime) else when), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size:.0f} {unit}"
    return f"{seconds:.0f} s"


def clock(when: datetime) -> str:
    return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def size(n: int) -> str:
    for unit, step in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= step:
            return f"{n / step:.1f} {unit}"
    return f"{n} B"


TEMPLATES.env.filters.update(age=age, clock=clock, size=size)


def page(request: Request, name: str, session: Session | None, status: int = 200, **context: Any) -> Response:
    return TEMPLATES.TemplateResponse(request, name, {"session": session, **context}, status_code=status,
                                      headers=HEADERS)


def see_other(url: str) -> Response:
    return RedirectResponse(url, status_code=303)


def changed(request: Request, trigger: str, url: str) -> Response:
    """A change's answer: for htmx, no content and the event its list refreshes on; for a plain
    form, back to the page."""
    if request.headers.get("hx-request"):
        return Response(status_code=204, headers={"HX-Trigger": trigger})
    return see_other(url)


def refused_form(e: ValidationError, problems: dict[str, str], default: str) -> ApiError:
    """A form the model refused, as a 400 that says what its first bad field must be (never
    echoing what was sent)."""
    where = e.errors()[0]["loc"] if e.errors() else ()
    return ApiError(Code.INVALID_REQUEST, problems.get(str(where[0]) if where else "", problems[default]))
