"""The console's team-wide pages: sign-in and sign-out, templates with their builds' live logs,
secrets (names, providers and their audit: never a value), and the fleet's nodes."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response, StreamingResponse

from hutch.console import session
from hutch.console.boxes import SessionDep
from hutch.console.pages import StateDep, page, see_other
from hutch.errors import ApiError
from hutch.server.auth import team_for_key
from hutch.services.models import BuildId, SecretName, TemplateRef
from hutch.services.secrets import providers

router = APIRouter()

SECRET_AUDIT_ROWS = 50


@router.get("/")
async def home(request: Request, st: StateDep) -> Response:
    try:
        session.current(st, request)
    except session.SignedOut:
        return see_other("/console/sign-in")
    return see_other("/console/boxes")


@router.get("/sign-in")
async def sign_in_page(request: Request) -> Response:
    return page(request, "sign_in.html", None)


@router.post("/sign-in")
async def sign_in(request: Request, st: StateDep) -> Response:
    """The API key, read once from the form, becomes a session; the browser keeps only the cookie."""
    session.check_origin(st, request)  # no one else's page signs a browser in as their team
    key = (await session.form(request)).get("api_key", "").strip()
    try:
        team_id = team_for_key(st, key, request) if key else None
    except ApiError:  # past the failed keys' limit (hutch.server.keyguard)
        return page(request, "sign_in.html", None, status=429,
                    error="Too many API keys that were not valid, from here or for this key: wait a minute.")
    if team_id is None:
        return page(request, "sign_in.html", None, status=401, error="That API key is not valid.")
    if (earlier := request.cookies.get(session.COOKIE)) is not None:
        st.store.close_session(earlier)  # a sign-in over another ends that one, not leaves it live for 12 h
    raw = st.store.open_session(team_id, key[:12], session.LIFETIME)
    response = see_other("/console/boxes")
    session.set_cookie(response, raw, session.secure(st))
    return response


@router.post("/sign-out")
async def sign_out(request: Request, st: StateDep) -> Response:
    s, _ = await session.changing(st, request)
    st.store.close_session(s.raw)  # the cookie is worthless from now on, wherever a copy of it is
    response = see_other("/console/sign-in")
    if request.headers.get("hx-request"):
        response = Response(status_code=204, headers={"HX-Redirect": "/console/sign-in"})
    session.clear_cookie(response, session.secure(st))
    return response


@router.get("/templates")
async def templates_page(request: Request, st: StateDep, s: SessionDep) -> Response:
    mine = st.templates.all(s.team_id)
    builds = {t.id: st.templates.list_builds(s.team_id, t.id)[:5] for t in mine if not t.system}
    return page(request, "templates.html", s, templates=mine, builds=builds, now=time.time())


@router.get("/templates/{ref}/builds/{build_id}")
async def build_page(request: Request, st: StateDep, s: SessionDep, ref: TemplateRef, build_id: BuildId) -> Response:
    tpl, build = st.templates.get_build(s.team_id, ref, build_id)
    return page(request, "build.html", s, template=st.templates.describe(tpl), build=st.templates.build_info(build, tpl))


@router.get("/templates/{ref}/builds/{build_id}/log")
async def build_log(st: StateDep, s: SessionDep, ref: TemplateRef, build_id: BuildId,
                    after: Annotated[int, Query(ge=0)] = 0) -> Response:
    """The build's log as the API streams it (one JSON object a line, to the build's end)."""
    lines = await st.templates.logs(s.team_id, ref, build_id, after, True)
    return StreamingResponse(lines, media_type="application/x-ndjson",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/secrets")
async def secrets_page(request: Request, st: StateDep, s: SessionDep) -> Response:
    mine = [st.secrets.info(r) for r in st.store.list_secrets(s.team_id)]
    return page(request, "secrets.html", s, secrets=mine, providers=providers())


@router.get("/secrets/{name}")
async def secret_page(request: Request, st: StateDep, s: SessionDep, name: SecretName) -> Response:
    info = st.secrets.info(st.secrets.get(s.team_id, name))
    uses = st.secrets.audit(s.team_id, name, SECRET_AUDIT_ROWS, None, None).entries
    return page(request, "secret.html", s, secret=info, uses=uses)


@router.get("/fleet")
async def fleet_page(request: Request, st: StateDep, s: SessionDep) -> Response:
    """A fleet's nodes from the store (with their boxes' reservations), or this host's capacity."""
    nodes = st.store.list_nodes() if st.fleet is not None else []
    capacity = st.node.capacity() if st.fleet is None else None
    return page(request, "fleet.html", s, nodes=nodes, capacity=capacity, now=time.time())
