"""The computer-use adapters (hutch.integrations.computer) over a stand-in desktop: which
`sandbox.desktop` calls each OpenAI Agents SDK computer call and each of Claude's computer-tool
actions makes, and what they return. No server: the desktop calls are recorded."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from hutch.integrations.computer import HutchComputer, anthropic_action, computer_class, xdotool_keys
from hutch.sdk import AsyncSandbox

PNG = b"\x89PNG\r\n\x1a\nscreen"


class StandIn:
    """The desktop calls, recorded; answers as a desktop box would."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str) -> Any:
        async def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, *args, *sorted(kwargs.items())))
            return {"screenshot": PNG, "screen_size": (1280, 800), "cursor_position": (7, 9)}.get(name)
        return record


def fake_sandbox() -> tuple[Any, StandIn]:
    box = AsyncSandbox.__new__(AsyncSandbox)  # an AsyncSandbox: its calls are awaited in place
    desktop = StandIn()
    box.desktop = desktop  # type: ignore[assignment]
    return box, desktop


def test_the_agents_sdk_computer() -> None:
    box, desktop = fake_sandbox()

    async def go() -> Any:
        computer = await HutchComputer.open(box)
        assert computer.dimensions == (1280, 800) and computer.environment == "linux"
        assert base64.b64decode(await computer.screenshot()) == PNG
        await computer.click(10, 20, "right")
        await computer.click(10, 20, "wheel")
        await computer.double_click(5, 6)
        await computer.scroll(100, 100, 0, 300)
        await computer.keypress(["CTRL", "SHIFT", "T"])
        await computer.type("hi")
        await computer.drag([(1, 2), (3, 4), (5, 6)])
        return computer

    computer = asyncio.run(go())
    assert isinstance(computer, computer_class())
    from agents import AsyncComputer
    assert isinstance(computer, AsyncComputer)  # what the SDK's ComputerTool takes
    assert desktop.calls == [
        ("screen_size",), ("screenshot",), ("click", 10, 20, ("button", "right")),
        ("click", 10, 20, ("button", "middle")), ("click", 5, 6, ("count", 2)),
        ("scroll", "down", 3, ("x", 100), ("y", 100)), ("key", "ctrl+shift+t"), ("type", "hi"),
        ("move", 1, 2), ("mouse_down",), ("move", 3, 4), ("move", 5, 6), ("mouse_up",)]


def test_xdotool_key_names() -> None:
    assert xdotool_keys(["ENTER"]) == "Return" and xdotool_keys(["F5"]) == "F5"
    assert xdotool_keys(["alt", "ArrowLeft"]) == "alt+Left"


def test_claudes_computer_actions() -> None:
    box, desktop = fake_sandbox()

    def act(**action: Any) -> list[dict[str, Any]]:
        return asyncio.run(anthropic_action(box, action))

    shot = act(action="screenshot")
    assert shot == [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": base64.b64encode(PNG).decode()}}]
    assert act(action="left_click", coordinate=[3, 4]) == shot  # each action answers with the screen after it
    act(action="double_click", coordinate=[3, 4])
    act(action="type", text="hello")
    act(action="key", text="ctrl+s")
    act(action="mouse_move", coordinate=[8, 9])
    act(action="scroll", coordinate=[50, 60], scroll_direction="up", scroll_amount=2)
    act(action="left_click_drag", start_coordinate=[1, 1], coordinate=[9, 9])
    assert act(action="cursor_position") == [{"type": "text", "text": "X=7,Y=9"}]
    assert act(action="fly")[0]["text"] == "unknown computer action 'fly'"
    made = [c for c in desktop.calls if c[0] != "screenshot"]
    assert made == [("click", 3, 4, ("button", "left"), ("count", 1)), ("click", 3, 4, ("button", "left"), ("count", 2)),
                    ("type", "hello"), ("key", "ctrl+s"), ("move", 8, 9),
                    ("scroll", "up", 2, ("x", 50), ("y", 60)), ("drag", (1, 1), (9, 9)), ("cursor_position",)]
