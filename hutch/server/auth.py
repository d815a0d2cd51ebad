"""Who is asking: a team by its API key (control plane), a sandbox by its access token (data plane).

Both answers are FastAPI dependencies; E2B's facade calls `authorize_box` for envd's token.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header
from starlette.requests import HTTPConnection

from hutch import tracing
from hutch.errors import ApiError, Code, not_found
from hutch.server.state import State, StateDep
from hutch.services import audit
from hutch.store import SandboxRecord, SandboxStatus


async def team(conn: HTTPConnection, st: StateDep, authorization: Annotated[str | None, Header()] = None,
         x_api_key: Annotated[str | None, Header()] = None) -> str:
    key = x_api_key or (authorization[7:].strip() if authorization and authorization[:7].lower() == "bearer " else None)
    if not key:
        raise ApiError(Code.UNAUTHORIZED, "an API key is required (Authorization: Bearer <key>)")
    team_id = team_for_key(st, key, conn)
    if team_id is None:
        raise ApiError(Code.INVALID_API_KEY, "the API key is not valid")
    tracing.annotate(team_id=team_id)
    return team_id


def team_for_key(st: State, key: str, conn: HTTPConnection) -> str | None:
    """The team a key is for, or None; a wrong key counts against its source and its prefix, and
    past their limit is a 429 (hutch.server.keyguard). Blocking (the store)."""
    team_id = st.store.team_for_api_key(key)
    if team_id is None:
        st.keyguard.failed(conn.client.host if conn.client else None, key)
    return team_id


TeamDep = Annotated[str, Depends(team)]


async def sandbox_by_token(sandbox_id: str, st: StateDep,
                     x_access_token: Annotated[str | None, Header()] = None) -> SandboxRecord:
    """The data plane takes only the sandbox's own access token, never an API key."""
    return authorize_box(st, sandbox_id, x_access_token)


def authorize_box(st: State, sandbox_id: str, x_access_token: str | None) -> SandboxRecord:
    """The box the token opens. A wrong token gets the same 401 whether or not the box exists (the
    MAC is computed either way), so the data plane says nothing of other boxes; a killed box is a
    404 only to a caller whose token was good for it."""
    if not x_access_token:
        raise ApiError(Code.UNAUTHORIZED, "the data plane needs the sandbox's access token (X-Access-Token)")
    rec = st.store.get_sandbox(sandbox_id, include_deleted=True)
    good = st.signer.verify(x_access_token, sandbox_id, rec.token_generation if rec else 0)
    if rec is None or not good:
        raise ApiError(Code.INVALID_ACCESS_TOKEN, "the access token is not valid for this sandbox")
    if rec.status == SandboxStatus.DELETED:
        raise not_found("sandbox", sandbox_id)
    tracing.annotate(team_id=rec.team_id, sandbox_id=rec.id)
    return rec


async def _actor(conn: HTTPConnection) -> str:
    return audit.actor(conn)


# The dependencies are async: a plain def would cost every request a hop to a worker thread and
# back (~0.3 ms here), more than the SQLite query each runs.
BoxDep = Annotated[SandboxRecord, Depends(sandbox_by_token)]
ActorDep = Annotated[str, Depends(_actor)]
