"""The console's terminal: a login shell spawned on a pseudo-terminal (boxops.spawn, audited as the
SDK's spawn is), and the same attachment the data plane's WebSocket serves (hutch.server.attach),
reached with the session's cookie instead of the box's token, which the page never holds.

A WebSocket carries no custom header and is not bound by CORS, so its handshake is checked as a
change is: the Origin must be the console's own, and the query must carry the session's CSRF token.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, WebSocket
from pydantic import BaseModel

from hutch.console import session
from hutch.console.pages import StateDep, state
from hutch.errors import ApiError, Code
from hutch.server.attach import serve_attachment
from hutch.services import boxops
from hutch.services.models import PtySize, SpawnCommand
from hutch.shell import LOGIN_SHELL
from hutch.store import SandboxRecord

router = APIRouter()


class Opened(BaseModel):
    pid: int


@router.post("/boxes/{sandbox_id}/terminal", response_model=Opened)
async def open_terminal(request: Request, st: StateDep, sandbox_id: str,
                        rows: Annotated[int, Query(ge=1, le=1000)] = 24,
                        cols: Annotated[int, Query(ge=1, le=1000)] = 80) -> Opened:
    s, _ = await session.changing(st, request)
    rec = st.sandboxes.get(s.team_id, sandbox_id)
    proc = await boxops.spawn(st, rec, s.actor(request),
                              SpawnCommand(command=LOGIN_SHELL, pty=PtySize(rows=rows, cols=cols)))
    return Opened(pid=proc.pid)


@router.websocket("/boxes/{sandbox_id}/processes/{pid}/ws")
async def attach(websocket: WebSocket, sandbox_id: str, pid: str,
                 csrf: Annotated[str, Query(max_length=128)] = "") -> None:
    st = state(websocket)

    def authorize() -> SandboxRecord:
        try:
            s = session.current(st, websocket)
        except session.SignedOut:
            raise ApiError(Code.UNAUTHORIZED, "sign in to the console first") from None
        session.check_csrf(st, s, websocket, csrf)
        return st.sandboxes.get(s.team_id, sandbox_id)

    await serve_attachment(websocket, st.data, st.audit, authorize, pid)  # the shell runs on in the box
