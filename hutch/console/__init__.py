"""The web console at /console: server-rendered pages (Jinja) with htmx for the live parts and
xterm.js for the terminal, both vendored in static/, and a refreshing screenshot for a desktop box's
screen; a team signs in with its API key, and every action goes through the services and the audit
the API's routes use."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from hutch.console import boxes, events, screen, session, team, terminal, volumes
from hutch.console.pages import page, see_other
from hutch.errors import ApiError
from hutch.server.state import State

PREFIX = "/console"
STATIC = Path(__file__).parent / "static"


async def _signed_out(request: Request, _exc: Exception) -> Response:
    if request.headers.get("hx-request"):  # a part that refreshes: the whole page goes to sign-in
        return Response(status_code=401, headers={"HX-Redirect": f"{PREFIX}/sign-in"})
    return see_other(f"{PREFIX}/sign-in")


async def _refused(request: Request, exc: Exception) -> Response:
    """An API error as a page (or, for an htmx part, as the part), with the API's status and code."""
    assert isinstance(exc, ApiError)
    return page(request, "error.html", None, status=exc.status, error=exc)


def app(get_state: Callable[[], State]) -> FastAPI:
    console = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    console.state.get_state = get_state
    console.add_exception_handler(session.SignedOut, _signed_out)
    console.add_exception_handler(ApiError, _refused)
    # in this order: boxes' /{action} is a catch-all
    for router in (team.router, terminal.router, screen.router, volumes.router, events.router, boxes.router):
        console.include_router(router)
    console.mount("/static", StaticFiles(directory=STATIC), name="static")
    return console


def mount(parent: FastAPI, get_state: Callable[[], State]) -> None:
    parent.mount(PREFIX, app(get_state))
