"""A desktop box (the `desktop` template) as the computer of computer-use agents:

- `HutchComputer`, the OpenAI Agents SDK's `AsyncComputer`, so `ComputerTool(HutchComputer(...))`
  drives a hutch desktop (`await HutchComputer.open(sandbox)` reads the screen's size once);
- `anthropic_action(sandbox, input)`, which carries out one action of Claude's computer-use tool
  (`screenshot`, `left_click`, `type`, `key`, `mouse_move`, `scroll`, `left_click_drag`, ...)
  and returns the tool result's content: an image block of the screen after it (text for
  `cursor_position`), so an agent loop needs one call per action.

Both go through `sandbox.desktop` (hutch.sdk.desktop), on a Sandbox or an AsyncSandbox.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any, Literal

from hutch.integrations.tools import AnySandbox, _call

# The Agents SDK's key names (as its computer-use models send them) in xdotool's
OPENAI_KEYS = {"enter": "Return", "return": "Return", "esc": "Escape", "escape": "Escape", "ctrl": "ctrl",
               "control": "ctrl", "alt": "alt", "shift": "shift", "cmd": "super", "super": "super", "meta": "super",
               "win": "super", "space": "space", "tab": "Tab", "backspace": "BackSpace", "delete": "Delete",
               "del": "Delete", "up": "Up", "down": "Down", "left": "Left", "right": "Right", "arrowup": "Up",
               "arrowdown": "Down", "arrowleft": "Left", "arrowright": "Right", "home": "Home", "end": "End",
               "pageup": "Page_Up", "pagedown": "Page_Down", "insert": "Insert", "capslock": "Caps_Lock"}
SCROLL_STEP = 100  # pixels of the Agents SDK's scroll per wheel notch


def xdotool_keys(keys: list[str]) -> str:
    """["CTRL", "S"] -> "ctrl+s"; F-keys and letters pass through."""
    names = []
    for key in keys:
        low = key.lower()
        names.append(OPENAI_KEYS.get(low, key.upper() if len(low) > 1 and low[0] == "f" and low[1:].isdigit()
                                     else low))
    return "+".join(names)


class HutchComputer:
    """The Agents SDK's AsyncComputer over a desktop box (a subclass is made when the SDK is there)."""

    def __init__(self, sandbox: AnySandbox, dimensions: tuple[int, int]) -> None:
        self.sandbox, self._dimensions = sandbox, dimensions

    @classmethod
    async def open(cls, sandbox: AnySandbox) -> HutchComputer:
        size = await _call(sandbox, "desktop.screen_size")
        return computer_class()(sandbox, tuple(size))

    @property
    def environment(self) -> Literal["linux"]:
        return "linux"

    @property
    def dimensions(self) -> tuple[int, int]:
        return self._dimensions

    async def screenshot(self) -> str:
        return base64.b64encode(await _call(self.sandbox, "desktop.screenshot")).decode()

    async def click(self, x: int, y: int, button: str) -> None:
        if button in ("back", "forward"):  # X's buttons 8 and 9: the browser's history keys instead
            await _call(self.sandbox, "desktop.key", "alt+Left" if button == "back" else "alt+Right")
            return
        await _call(self.sandbox, "desktop.click", x, y, button="middle" if button == "wheel" else button)

    async def double_click(self, x: int, y: int) -> None:
        await _call(self.sandbox, "desktop.click", x, y, count=2)

    async def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int) -> None:
        for amount, positive, negative in ((scroll_y, "down", "up"), (scroll_x, "right", "left")):
            if amount:
                notches = max(1, abs(amount) // SCROLL_STEP)
                await _call(self.sandbox, "desktop.scroll", positive if amount > 0 else negative, notches, x=x, y=y)

    async def type(self, text: str) -> None:
        await _call(self.sandbox, "desktop.type", text)

    async def wait(self) -> None:
        await asyncio.sleep(1)

    async def move(self, x: int, y: int) -> None:
        await _call(self.sandbox, "desktop.move", x, y)

    async def keypress(self, keys: list[str]) -> None:
        await _call(self.sandbox, "desktop.key", xdotool_keys(keys))

    async def drag(self, path: list[tuple[int, int]]) -> None:
        if len(path) < 2:
            return
        await _call(self.sandbox, "desktop.move", *path[0])
        await _call(self.sandbox, "desktop.mouse_down")
        for x, y in path[1:]:
            await _call(self.sandbox, "desktop.move", x, y)
        await _call(self.sandbox, "desktop.mouse_up")


_made: dict[str, type[HutchComputer]] = {}


def computer_class() -> type[HutchComputer]:
    """HutchComputer as a subclass of the Agents SDK's AsyncComputer when it is installed (its
    ComputerTool checks the type), else HutchComputer itself."""
    if "class" not in _made:
        try:
            from agents import AsyncComputer
        except ImportError:
            _made["class"] = HutchComputer
        else:
            _made["class"] = type("HutchComputer", (HutchComputer, AsyncComputer), {})
    return _made["class"]


# --- Claude's computer-use tool --------------------------------------------------------------------

CLICKS = {"left_click": ("left", 1), "right_click": ("right", 1), "middle_click": ("middle", 1),
          "double_click": ("left", 2), "triple_click": ("left", 3)}


def image_block(png: bytes) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                        "data": base64.b64encode(png).decode()}}


def _point(action: dict[str, Any], name: str = "coordinate") -> tuple[int, int] | None:
    value = action.get(name)
    return None if value is None else (int(value[0]), int(value[1]))


async def anthropic_action(sandbox: AnySandbox, action: dict[str, Any]) -> list[dict[str, Any]]:
    """Carry out one input of Claude's computer tool (computer_20250124's actions) and return the
    tool result's content: the screen after it as an image block, or text (`cursor_position`, an
    unknown action). An error of the box comes back as text too, for the model to read."""
    kind = action.get("action")
    try:
        point = _point(action)
        if kind == "screenshot":
            pass
        elif kind in CLICKS:
            button, count = CLICKS[kind]
            x, y = point or (None, None)
            await _call(sandbox, "desktop.click", x, y, button=button, count=count)
        elif kind == "mouse_move" and point:
            await _call(sandbox, "desktop.move", *point)
        elif kind == "left_click_drag":
            start = _point(action, "start_coordinate") or tuple(await _call(sandbox, "desktop.cursor_position"))
            if point:
                await _call(sandbox, "desktop.drag", start, point)
        elif kind == "left_mouse_down":
            await _call(sandbox, "desktop.mouse_down")
        elif kind == "left_mouse_up":
            await _call(sandbox, "desktop.mouse_up")
        elif kind == "type":
            await _call(sandbox, "desktop.type", str(action.get("text", "")))
        elif kind in ("key", "hold_key"):
            await _call(sandbox, "desktop.key", str(action.get("text", "")))
        elif kind == "scroll":
            x, y = point or (None, None)
            await _call(sandbox, "desktop.scroll", str(action.get("scroll_direction", "down")),
                        int(action.get("scroll_amount", 3)), x=x, y=y)
        elif kind == "wait":
            await asyncio.sleep(min(float(action.get("duration", 1)), 60))
        elif kind == "cursor_position":
            x, y = await _call(sandbox, "desktop.cursor_position")
            return [{"type": "text", "text": f"X={x},Y={y}"}]
        else:
            return [{"type": "text", "text": f"unknown computer action {kind!r}"}]
        return [image_block(await _call(sandbox, "desktop.screenshot"))]
    except Exception as e:  # the model reads why, and can try again
        return [{"type": "text", "text": f"the action {kind!r} failed: {e}"}]
