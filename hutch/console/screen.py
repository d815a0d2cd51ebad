"""The console's view of a desktop box's screen: a screenshot (hutch.services.desktop, the API's own
capture) behind the session, which the box's page reloads about every second while it is shown.

A screenshot rather than noVNC in a frame: watching changes nothing in the box (no x11vnc or noVNC
started, no port published, no preview link made, and no way to click into the agent's screen by
mistake), the page keeps its policy (no frames, images from the console only), and it costs one
capture a second, while someone looks. Not audited, as the API's screenshot is not: it reads.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from hutch.console import session
from hutch.console.pages import StateDep
from hutch.errors import ApiError, Code
from hutch.services.desktop import Desktops
from hutch.services.system_templates import DESKTOP_TEMPLATES
from hutch.store import SandboxRecord, SandboxStatus

router = APIRouter()


def is_desktop(st: StateDep, rec: SandboxRecord) -> bool:
    """A box of the desktop template, or of a template with a display in its env (one made from it)."""
    if rec.template in DESKTOP_TEMPLATES:
        return True
    template = st.store.get_template(rec.template_id or rec.template, rec.team_id)
    return template is not None and "DISPLAY" in template.env


@router.get("/boxes/{sandbox_id}/screen.png")
async def screen(request: Request, st: StateDep, sandbox_id: str) -> Response:
    """The box's screen, as a PNG; a box not running is a 409 (watching never resumes one)."""
    s = session.current(st, request)
    rec = st.sandboxes.get(s.team_id, sandbox_id)
    if rec.status != SandboxStatus.ACTIVE:
        raise ApiError(Code.CONFLICT, f"the box is {rec.status}: its screen shows while it runs")
    return Response(await Desktops(st.data).screenshot(rec), media_type="image/png",
                    headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})
