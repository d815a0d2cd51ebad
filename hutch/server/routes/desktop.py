"""The data plane's desktop (/data/v1/sandboxes/{id}/desktop): a desktop box's screen and input
(hutch.services.desktop). The box's token opens them; each is one command in the box, audited as
`desktop` with the command it ran (a typed text by its length only)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from hutch.server.auth import ActorDep, BoxDep
from hutch.server.state import StateDep
from hutch.services.desktop import STREAM_PAGE, STREAM_PORT, Action, Cursor, Desktops, Screen, StartDesktop, audited
from hutch.services.desktop import start_command as desktop_start_command

router = APIRouter(prefix="/data/v1/sandboxes/{sandbox_id}/desktop")


@router.post("/start", status_code=204)
async def start_desktop(body: StartDesktop, rec: BoxDep, st: StateDep, who: ActorDep) -> Response:
    """Xvfb at the size asked and an XFCE session, unless the desktop runs already (it keeps its size)."""
    async with st.audit.record(rec, who, "desktop", desktop_start_command(body)):
        await Desktops(st.data).start(rec, body)
    return Response(status_code=204)


@router.get("/screenshot", response_class=Response, responses={200: {"content": {"image/png": {}}}})
async def screenshot(rec: BoxDep, st: StateDep) -> Response:
    """The screen, as a PNG (the pointer drawn in)."""
    return Response(await Desktops(st.data).screenshot(rec), media_type="image/png",
                    headers={"Cache-Control": "no-store"})


@router.post("/actions", status_code=204)
async def act(body: Action, rec: BoxDep, st: StateDep, who: ActorDep) -> Response:
    """One input action: click, move, type, key, scroll, drag, mouse_down or mouse_up."""
    async with st.audit.record(rec, who, "desktop", audited(body)):
        await Desktops(st.data).act(rec, body)
    return Response(status_code=204)


@router.get("/cursor", response_model=Cursor)
async def cursor(rec: BoxDep, st: StateDep) -> Cursor:
    return await Desktops(st.data).cursor(rec)


@router.get("/screen", response_model=Screen)
async def screen(rec: BoxDep, st: StateDep) -> Screen:
    return await Desktops(st.data).screen(rec)


@router.post("/stream")
async def stream(rec: BoxDep, st: StateDep, who: ActorDep) -> dict[str, object]:
    """x11vnc and noVNC running on the box's STREAM_PORT; the port and its page's path (publish the
    port to reach it: the SDK's `stream_url` does, privately)."""
    async with st.audit.record(rec, who, "desktop", "stream"):
        await Desktops(st.data).stream(rec)
    return {"port": STREAM_PORT, "path": STREAM_PAGE}
