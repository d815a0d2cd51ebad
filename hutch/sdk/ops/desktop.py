"""A desktop box's screen and input (a box of the `desktop` template): start it, screenshot, the
input actions, the pointer and screen size, and the stream's preview URL."""

from __future__ import annotations

import json
from typing import Any

import httpx

from hutch.sdk import routes
from hutch.sdk.codes import SdkCode
from hutch.sdk.errors import ValidationError
from hutch.sdk.flow import Call, Flow
from hutch.sdk.ops import previews, sandboxes
from hutch.sdk.ops.sandboxes import DataPlane, send_data
from hutch.sdk.types import SandboxInfo

DESKTOP_TIMEOUT = httpx.Timeout(connect=10.0, read=180.0, write=60.0, pool=10.0)  # XFCE's start, a long text
DEFAULT_RESOLUTION = (1024, 768)
TEMPLATES = ("desktop", "hutch/desktop")  # the server's desktop templates (hutch.services.system_templates)
BUTTONS = ("left", "middle", "right")
DIRECTIONS = ("up", "down", "left", "right")


def _post(dp: DataPlane, route: routes.Route, body: dict[str, Any] | None) -> Flow[bytes]:
    reply = yield from send_data(dp, lambda: Call(*route.at(dp.url), dp.headers(), json=body, timeout=DESKTOP_TIMEOUT))
    return reply.body


def _get(dp: DataPlane, route: routes.Route) -> Flow[bytes]:
    reply = yield from send_data(dp, lambda: Call(*route.at(dp.url), dp.headers(), timeout=DESKTOP_TIMEOUT))
    return reply.body


def start(dp: DataPlane, resolution: tuple[int, int] | None, dpi: int | None) -> Flow[None]:
    width, height = resolution or DEFAULT_RESOLUTION
    yield from _post(dp, routes.DESKTOP_START, {"width": width, "height": height, "dpi": dpi or 96})


def with_desktop(create: Flow[tuple[SandboxInfo, DataPlane]], resolution: tuple[int, int] | None,
                 dpi: int | None) -> Flow[tuple[SandboxInfo, DataPlane]]:
    """A create that returns once the box's desktop runs; a box whose desktop cannot start is
    killed, and the error raised."""
    info, dp = yield from create
    try:
        yield from start(dp, resolution, dpi)
    except BaseException:
        try:
            yield from sandboxes.kill(dp.cfg, info.id)
        except Exception:
            pass
        raise
    return info, dp


def screenshot(dp: DataPlane) -> Flow[bytes]:
    return (yield from _get(dp, routes.DESKTOP_SCREENSHOT))


def _point(x: int | None, y: int | None) -> dict[str, int]:
    if (x is None) != (y is None):
        raise ValidationError("give both x and y, or neither", code=SdkCode.INVALID_ARGUMENT)
    return {} if x is None or y is None else {"x": x, "y": y}


def _button(button: str) -> str:
    if button not in BUTTONS:
        raise ValidationError(f"button is one of {', '.join(BUTTONS)}, not {button!r}", code=SdkCode.INVALID_ARGUMENT)
    return button


def act(dp: DataPlane, action: str, **fields: Any) -> Flow[None]:
    yield from _post(dp, routes.DESKTOP_ACTION, {"action": action, **fields})


def click(dp: DataPlane, x: int | None, y: int | None, button: str, count: int) -> Flow[None]:
    yield from act(dp, "click", **_point(x, y), button=_button(button), count=count)


def move(dp: DataPlane, x: int, y: int) -> Flow[None]:
    yield from act(dp, "move", x=x, y=y)


def type_text(dp: DataPlane, text: str) -> Flow[None]:
    yield from act(dp, "type", text=text)


def key(dp: DataPlane, combo: str) -> Flow[None]:
    yield from act(dp, "key", combo=combo)


def scroll(dp: DataPlane, direction: str, amount: int, x: int | None, y: int | None) -> Flow[None]:
    if direction not in DIRECTIONS:
        raise ValidationError(f"direction is one of {', '.join(DIRECTIONS)}, not {direction!r}",
                              code=SdkCode.INVALID_ARGUMENT)
    yield from act(dp, "scroll", direction=direction, amount=amount, **_point(x, y))


def drag(dp: DataPlane, start: tuple[int, int], end: tuple[int, int], button: str) -> Flow[None]:
    yield from act(dp, "drag", x=start[0], y=start[1], to_x=end[0], to_y=end[1], button=_button(button))


def press_button(dp: DataPlane, down: bool, button: str) -> Flow[None]:
    yield from act(dp, "mouse_down" if down else "mouse_up", button=_button(button))


def cursor(dp: DataPlane) -> Flow[tuple[int, int]]:
    answer = json.loads((yield from _get(dp, routes.DESKTOP_CURSOR)))
    return int(answer["x"]), int(answer["y"])


def screen_size(dp: DataPlane) -> Flow[tuple[int, int]]:
    answer = json.loads((yield from _get(dp, routes.DESKTOP_SCREEN)))
    return int(answer["width"]), int(answer["height"])


def stream_url(dp: DataPlane, access: str, expires_in_seconds: int) -> Flow[str]:
    """noVNC's page at the box's preview URL: the stream started, its port published (private by
    default), and for a private port a signed link (a browser exchanges it for the port's cookie)."""
    answer = json.loads((yield from _post(dp, routes.DESKTOP_STREAM, None)))
    port, page = int(answer["port"]), str(answer["path"])
    published = yield from previews.publish(dp.cfg, dp.sandbox_id, port, access)
    if access == "public":
        return published.url.rstrip("/") + page
    link = yield from previews.signed_url(dp.cfg, dp.sandbox_id, port, expires_in_seconds)
    return _with_page(link, page)


def _with_page(link: str, page: str) -> str:
    """The signed link (to the port's root, its signature in the query) pointed at the page."""
    base, _, query = link.partition("?")
    path, _, page_query = page.partition("?")
    return base.rstrip("/") + path + "?" + "&".join(q for q in (query, page_query) if q)
