"""A desktop box's screen and input (a box of the `desktop` template, base_image.DESKTOP): start its
desktop, take a screenshot, move, click, type, press keys, scroll and drag, and serve its screen to
a browser (x11vnc and noVNC on port STREAM_PORT, reached through a private preview URL).

Each call is one command in the box, run as the box user with the box's env (DISPLAY) through the
data plane, as `commands.run` runs one: xdotool for input, scrot for the screen (the X server's own
capture, written to a file in the box's memory, read back in the same call and removed). Nothing
the caller gives reaches a shell unquoted: coordinates are integers, keys are checked against
xdotool's key-name grammar, text goes as one quoted argument.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, model_validator

from hutch.errors import ApiError, Code
from hutch.node.agent import read_capped
from hutch.node.api import AgentProtocolError
from hutch.services.models import RunCommand, Strict
from hutch.store import SandboxRecord

if TYPE_CHECKING:
    from hutch.services.dataplane import DataPlane

STREAM_PORT = 6080  # noVNC's page and its WebSocket (websockify), as e2b-desktop has them
VNC_PORT = 5900
MAX_SCREENSHOT = 64 * 2**20
ACTION_SECONDS = 60.0  # one action, past the time its text takes to type
TYPE_SECONDS = 600  # the most one text may take to type at its delay (refused past it)
START_SECONDS = 120.0
BUTTONS = {"left": 1, "middle": 2, "right": 3}
# xdotool's key names, joined by "+": letters, digits, keysyms (Return, ctrl, F5, KP_Enter, ...)
KEY_COMBO = re.compile(r"^[A-Za-z0-9_]+(\+[A-Za-z0-9_]+)*$")
Coordinate = Annotated[int, Field(ge=0, le=16384)]
Button = Literal["left", "middle", "right"]


class StartDesktop(Strict):
    width: Annotated[int, Field(ge=320, le=7680)] = 1024
    height: Annotated[int, Field(ge=240, le=4320)] = 768
    dpi: Annotated[int, Field(ge=50, le=600)] = 96


class _At(Strict):
    """An action at x, y, or at the pointer where it is: both or neither."""

    x: Coordinate | None = None
    y: Coordinate | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> _At:
        if (self.x is None) != (self.y is None):
            raise ValueError("give both x and y, or neither (the pointer stays where it is)")
        return self


class Click(_At):
    action: Literal["click"]
    button: Button = "left"
    count: Annotated[int, Field(ge=1, le=3)] = 1


class Move(Strict):
    action: Literal["move"]
    x: Coordinate
    y: Coordinate


class TypeText(Strict):
    action: Literal["type"]
    text: Annotated[str, Field(max_length=10_000, pattern=r"^[^\x00]*$")]  # no NUL: no command carries one
    delay_ms: Annotated[int, Field(ge=0, le=1000)] = 12

    @model_validator(mode="after")
    def _typed_in_time(self) -> TypeText:
        if len(self.text) * self.delay_ms > TYPE_SECONDS * 1000:
            raise ValueError(f"the text would take over {TYPE_SECONDS} s to type at {self.delay_ms} ms a character")
        return self

    @property
    def seconds(self) -> float:
        """About how long typing it takes: its delays and xdotool's own pace (~5 ms a character)."""
        return len(self.text) * (self.delay_ms + 5) / 1000


class Key(Strict):
    action: Literal["key"]
    combo: Annotated[str, Field(max_length=200, pattern=KEY_COMBO.pattern)]  # "ctrl+s", "Return"


class Scroll(_At):
    action: Literal["scroll"]
    direction: Literal["up", "down", "left", "right"] = "down"
    amount: Annotated[int, Field(ge=1, le=100)] = 1


class Drag(Strict):
    action: Literal["drag"]
    x: Coordinate
    y: Coordinate
    to_x: Coordinate
    to_y: Coordinate
    button: Button = "left"


class ButtonPress(Strict):
    action: Literal["mouse_down", "mouse_up"]
    button: Button = "left"


Action = Annotated[Click | Move | TypeText | Key | Scroll | Drag | ButtonPress, Field(discriminator="action")]


class Cursor(Strict):
    x: int
    y: int


class Screen(Strict):
    width: int
    height: int


def command_of(action: Click | Move | TypeText | Key | Scroll | Drag | ButtonPress) -> str:
    """The xdotool command line an action is (every part validated or quoted). No `mousemove
    --sync`: it waits for the pointer to move, which it never does when already there (measured:
    a second move to the same point took 15.6 s); one connection's requests are taken in order."""
    match action:
        case Click(x=x, y=y, button=button, count=count):
            at = f"mousemove {x} {y} " if x is not None else ""
            return f"xdotool {at}click --repeat {count} {BUTTONS[button]}"
        case Move(x=x, y=y):
            return f"xdotool mousemove {x} {y}"
        case TypeText(text=text, delay_ms=delay):
            return f"xdotool type --delay {delay} -- {shlex.quote(text)}" if text else "true"
        case Key(combo=combo):
            return f"xdotool key -- {combo}"
        case Scroll(direction=direction, amount=amount, x=x, y=y):
            wheel = {"up": 4, "down": 5, "left": 6, "right": 7}[direction]
            at = f"mousemove {x} {y} " if x is not None and y is not None else ""
            return f"xdotool {at}click --repeat {amount} {wheel}"
        case Drag(x=x, y=y, to_x=to_x, to_y=to_y, button=button):
            b = BUTTONS[button]
            return (f"xdotool mousemove {x} {y} mousedown {b} mousemove {to_x} {to_y} "
                    f"sleep 0.05 mouseup {b}")
        case ButtonPress(action=kind, button=button):
            return f"xdotool {'mousedown' if kind == 'mouse_down' else 'mouseup'} {BUTTONS[button]}"
    raise AssertionError(action)


def audited(action: Click | Move | TypeText | Key | Scroll | Drag | ButtonPress) -> str:
    """What the audit log keeps of an action: its command, but for a text only its length (a
    password typed into a page must not be kept for the log's retention)."""
    if isinstance(action, TypeText):
        return f"xdotool type ({len(action.text)} characters)"
    return command_of(action)


def start_command(start: StartDesktop) -> str:
    return f"hutch-desktop {start.width} {start.height} {start.dpi}"


# x11vnc and noVNC, once: with no password (the preview URL is private: its link or token is the
# credential), listening on the box's loopback only (a box has no other network).
STREAM_COMMAND = (
    f"pgrep -x x11vnc >/dev/null || x11vnc -bg -display \"$DISPLAY\" -forever -wait 50 -shared -localhost "
    f"-rfbport {VNC_PORT} -nopw >/tmp/x11vnc.log 2>&1; "
    f"listening() {{ netstat -tln | grep -q ':{STREAM_PORT} '; }}; "
    f"listening || (cd /opt/noVNC/utils && setsid ./novnc_proxy --vnc localhost:{VNC_PORT} --listen {STREAM_PORT} "
    f"--web /opt/noVNC </dev/null >/tmp/novnc.log 2>&1 &); "
    f"i=0; until listening; do i=$((i+1)); [ $i -lt 300 ] || {{ tail -5 /tmp/novnc.log >&2; exit 1; }}; sleep 0.1; done"
)
STREAM_PAGE = "/vnc.html?autoconnect=true&resize=scale&reconnect=true"


class Desktops:
    """The desktop calls, over the data plane's commands and files."""

    def __init__(self, data: DataPlane) -> None:
        self.data = data

    async def _run(self, rec: SandboxRecord, command: str, timeout: float = ACTION_SECONDS) -> str:
        stream = await self.data.start_command(rec, RunCommand(command=command, timeout_seconds=timeout))
        result = await self.data.run_to_end(stream, rec)
        if result.exit_code != 0:
            why = (result.stderr or result.stdout).strip()[-500:]
            if result.exit_code == 127:  # the shell found no xdotool, scrot or hutch-desktop
                raise ApiError(Code.DESKTOP_UNAVAILABLE, f"sandbox {rec.id} is not a desktop: create it from the "
                                                         "`desktop` template")
            raise ApiError(Code.DESKTOP_UNAVAILABLE, f"the desktop of sandbox {rec.id} did not take the call "
                                                     f"(exit {result.exit_code}): {why or 'no reason given'}")
        return result.stdout

    async def start(self, rec: SandboxRecord, start: StartDesktop) -> None:
        """Xvfb at the size asked and an XFCE session, unless they run already; returns once drawn."""
        await self._run(rec, start_command(start), START_SECONDS)

    async def act(self, rec: SandboxRecord, action: Click | Move | TypeText | Key | Scroll | Drag | ButtonPress) -> None:
        extra = action.seconds if isinstance(action, TypeText) else 0.0
        await self._run(rec, command_of(action), ACTION_SECONDS + extra)

    async def cursor(self, rec: SandboxRecord) -> Cursor:
        out = await self._run(rec, "xdotool getmouselocation --shell")
        x, y = _numbers(rec, re.search(r"^X=(\d{1,5})\nY=(\d{1,5})$", out, re.MULTILINE), "pointer")
        return Cursor(x=x, y=y)

    async def screen(self, rec: SandboxRecord) -> Screen:
        out = await self._run(rec, "xdpyinfo | sed -n 's/^ *dimensions: *\\([0-9]*\\)x\\([0-9]*\\) .*/\\1 \\2/p'")
        width, height = _numbers(rec, re.fullmatch(r"(\d{1,5}) (\d{1,5})\n?", out), "screen size")
        return Screen(width=width, height=height)

    async def screenshot(self, rec: SandboxRecord) -> bytes:
        """The screen as PNG bytes, the pointer drawn in."""
        path = f"/tmp/.hutch-screenshot-{secrets.token_hex(8)}.png"
        await self._run(rec, f"scrot --overwrite --pointer {path}")
        try:
            head, body = await self.data.read_file(rec, path)
            if head.size is not None and head.size > MAX_SCREENSHOT:
                raise ApiError(Code.DESKTOP_UNAVAILABLE, "the screenshot is larger than hutch takes")
            try:  # its size is the box's word, and a chunked answer says none: counted as it comes
                return await read_capped(body, MAX_SCREENSHOT)
            except AgentProtocolError:
                raise ApiError(Code.DESKTOP_UNAVAILABLE, "the screenshot is larger than hutch takes") from None
            finally:
                if isinstance(body, AsyncGenerator):
                    await body.aclose()
        finally:
            await self.data.remove(rec, path)

    async def stream(self, rec: SandboxRecord) -> None:
        """x11vnc and noVNC running, on STREAM_PORT of the box."""
        await self._run(rec, STREAM_COMMAND)


def _numbers(rec: SandboxRecord, found: re.Match[str] | None, what: str) -> tuple[int, int]:
    """Two numbers the box printed (its xdotool's or xdpyinfo's): anything else is its failure."""
    if found is None:
        raise ApiError(Code.DESKTOP_UNAVAILABLE, f"the desktop of sandbox {rec.id} did not say its {what}")
    return int(found.group(1)), int(found.group(2))
