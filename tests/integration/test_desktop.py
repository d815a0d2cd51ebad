"""hutch's own desktop API (`sandbox.desktop`, sync and async) on a box of the `desktop` template:
create at a resolution, screenshots, input, the pointer, and the live screen in a real browser
through a private preview URL (noVNC over the preview proxy's WebSocket)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from hutch import ConflictError, Sandbox, ValidationError
from tests.integration import pngs
from tests.integration.support import Env, wait_for
from tests.integration.test_console import _browser
from tests.integration.test_desktop_e2b import needs_desktop


def editor_window(box: Any) -> str:
    found: list[str] = []

    def shown() -> bool:
        found[:] = box.commands.run("xdotool search --onlyvisible --class mousepad || true").stdout.split()
        return bool(found)
    wait_for(shown, 60, "the editor's window")
    return found[0]


def test_create_screenshot_and_input(sdk: Any) -> None:
    needs_desktop()
    started = time.monotonic()
    box = sdk.create(name="desk", from_template="desktop", resolution=(1280, 720))
    try:
        first = box.desktop.screenshot()
        print(f"create to first screenshot: {time.monotonic() - started:.1f} s")
        assert first[:8] == pngs.MAGIC and pngs.decode(first)[:2] == (1280, 720)
        assert box.desktop.screen_size() == (1280, 720)
        box.commands.spawn("mousepad")
        window = editor_window(box)
        time.sleep(1)
        empty = box.desktop.screenshot()
        box.desktop.click(640, 360)
        box.desktop.type("typed by hutch")
        box.desktop.key("Return")
        box.desktop.type("second line")
        wait_for(lambda: box.commands.run(f"xdotool getwindowname {window}").stdout.startswith("*"), 20, "the edit")
        typed = box.desktop.screenshot()
        assert pngs.differing(empty, typed) > 200
        box.desktop.key("ctrl+z")  # the editor's undo takes the last typing back: the keys reached it
        wait_for(lambda: pngs.differing(typed, box.desktop.screenshot()) > 50, 20, "the undo")
        box.desktop.move(100, 200)
        assert box.desktop.cursor_position() == (100, 200)
        box.desktop.drag((300, 300), (500, 400))
        assert box.desktop.cursor_position() == (500, 400)
        box.desktop.scroll("down", 3, x=640, y=360)
        box.desktop.click(button="right")
        box.desktop.key("Escape")
        box.desktop.click(10, 10, count=2)
        box.desktop.mouse_down()
        box.desktop.mouse_up()
        ops = [e.detail for e in box.get_audit_log().entries if e.op == "desktop"]
        assert "xdotool key -- ctrl+z" in ops
        with pytest.raises(ValidationError):
            box.desktop.key("ctrl+s; rm -rf /")  # a key name is checked: nothing reaches a shell
    finally:
        box.kill()


def test_a_box_without_a_desktop_says_so(box: Any) -> None:
    with pytest.raises(ConflictError) as refused:
        box.desktop.screenshot()
    assert refused.value.code == "desktop_unavailable"


def test_the_live_screen_in_a_browser(env: Env) -> None:
    needs_desktop()
    box = Sandbox.create(name="desk-stream", from_template="desktop")
    driver = None
    try:
        url = box.desktop.stream_url()
        assert "hutch_preview=" in url and "/vnc.html?" in url
        assert [p.access for p in box.list_preview_ports()] == ["private"]
        driver = _browser(env.server.data_dir)
        driver.get(url)  # the signed link becomes the port's cookie; the page opens its WebSocket with it

        def connected() -> bool:
            assert driver is not None
            size: list[int] | None = driver.execute_script(
                "const c = document.querySelector('#noVNC_container canvas');"
                "return c ? [c.width, c.height] : null;")
            return size == [1024, 768]
        try:
            wait_for(connected, 60, "noVNC's canvas at the screen's size")
        except AssertionError:
            status = driver.execute_script("return document.getElementById('noVNC_status').textContent")
            logs = box.commands.run("tail -5 /tmp/novnc.log /tmp/x11vnc.log; netstat -tln").stdout
            raise AssertionError(f"noVNC did not connect: {status!r} at {driver.current_url}\n{logs}") from None
        box.commands.spawn("mousepad")
        editor_window(box)
        # what the box draws reaches the browser: the canvas is no longer one colour
        wait_for(lambda: driver.execute_script(
            "const c = document.querySelector('#noVNC_container canvas');"
            "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "const s = new Set(); for (let i = 0; i < d.length; i += 4096) s.add(d[i] + ',' + d[i+1]); return s.size;")
                 > 3, 30, "the screen drawn in the browser")
    finally:
        if driver is not None:
            driver.quit()
        box.kill()


def test_the_mcp_servers_desktop_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """desktop_screenshot (an image result), desktop_click, desktop_type, desktop_key, as an agent's MCP
    client calls them, on a box sandbox_create made from the desktop template."""
    needs_desktop()
    import base64
    import json

    from mcp import Client

    from hutch.integrations.mcp_server import build

    monkeypatch.setenv("HUTCH_ACTOR", "hutch-mcp")  # build() sets it when unset: kept to this test

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with Client(build()) as client:
            async def tool(tool_name: str, **args: Any) -> Any:
                """The tool's first content block, as it went over the wire."""
                return (await client.call_tool(tool_name, args)).content[0].model_dump(by_alias=True, mode="json")

            made = await tool("sandbox_create", name="mcp-desk", template="desktop", resolution=[800, 600])
            sid = out["id"] = json.loads(made["text"])["id"]
            try:
                shot = await tool("desktop_screenshot", sandbox_id=sid)
                out["shot"] = (shot["type"], shot["mimeType"], base64.b64decode(shot["data"]))
                await tool("sandbox_exec", sandbox_id=sid, command="mousepad >/dev/null 2>&1 &")
                box = Sandbox.connect(sid)
                window = editor_window(box)
                time.sleep(1)
                empty = box.desktop.screenshot()
                out["click"] = (await tool("desktop_click", sandbox_id=sid, x=400, y=300))["text"]
                out["type"] = (await tool("desktop_type", sandbox_id=sid, text="from mcp"))["text"]
                out["key"] = (await tool("desktop_key", sandbox_id=sid, combo="Return"))["text"]
                wait_for(lambda: box.commands.run(f"xdotool getwindowname {window}").stdout.startswith("*"), 20,
                         "the edit")
                typed = await tool("desktop_screenshot", sandbox_id=sid)
                out["changed"] = pngs.differing(empty, base64.b64decode(typed["data"]))
                out["bad_key"] = (await tool("desktop_key", sandbox_id=sid, combo="ctrl+s; reboot"))["text"]
                out["actors"] = {e.actor.split(" ")[-1] for e in box.get_audit_log().entries if e.op == "desktop"}
                box.close()
            finally:
                await tool("sandbox_kill", sandbox_id=sid)
            plain = json.loads((await tool("sandbox_create", name="mcp-plain"))["text"])["id"]
            try:
                out["no_desktop"] = (await tool("desktop_screenshot", sandbox_id=plain))["text"]
            finally:
                await tool("sandbox_kill", sandbox_id=plain)
        return out

    out = asyncio.run(go())
    kind, mime, png = out["shot"]
    assert (kind, mime) == ("image", "image/png") and pngs.decode(png)[:2] == (800, 600)
    assert out["click"] == "clicked left at (400, 300)" and out["type"] == "typed 8 characters"
    assert out["key"] == "pressed Return" and out["changed"] > 200
    assert out["bad_key"].startswith("error: invalid_request: key.combo"), out["bad_key"]
    assert out["actors"] == {"hutch-mcp"}
    assert out["no_desktop"].startswith("error: desktop_unavailable"), out["no_desktop"]


def test_an_agent_on_the_scripted_model_drives_the_desktop_through_mcp(env: Env) -> None:
    """The OpenAI Agents SDK's loop, the scripted model in place of an LLM, the MCP server's desktop tools:
    the screenshot reaches the agent's loop as an image (a PNG data URL), each action as its text. (Its
    Chat Completions model leaves images out of tool messages, as OpenAI's API takes none there: the
    scripted model, which speaks that API, reads "[tool output omitted]" for the screenshot.)"""
    needs_desktop()
    import base64
    import json
    import sys

    from agents import Runner
    from agents.mcp import MCPServerStdio

    from hutch.integrations.scripted_model import Script, ScriptedModel, answer, call, text_of
    from tests.integration.test_integrations import _agent, _client_env

    made: dict[str, str] = {}

    def on_made_box(tool: str, **args: Any) -> Any:
        def step(messages: list[dict[str, Any]]) -> Any:
            if not made:
                made["id"] = json.loads(next(text_of(m) for m in messages if m.get("role") == "tool"))["id"]
            return call(tool, sandbox_id=made["id"], **args)
        return step

    async def go() -> tuple[str, list[Any], list[str]]:
        script: Script = [call("sandbox_create", name="agent-desk", template="desktop", resolution=[800, 600]),
                          on_made_box("desktop_screenshot"), on_made_box("desktop_click", x=400, y=300),
                          on_made_box("desktop_type", text="hello"), on_made_box("desktop_key", combo="ctrl+a"),
                          on_made_box("sandbox_kill"), answer("done")]
        with ScriptedModel(script) as model:
            async with MCPServerStdio(params={"command": sys.executable, "args": ["-m", "hutch.cli", "mcp", "serve"],
                                              "env": _client_env(env)}, client_session_timeout_seconds=180) as mcp:
                result = await Runner.run(_agent(model, [], mcp_servers=[mcp]), "use the desktop")
            raw: list[Any] = [item.raw_item for item in result.new_items if item.type == "tool_call_output_item"]
            outputs = [r["output"] for r in raw]
            return str(result.final_output), outputs, model.tool_results()

    try:
        final, outputs, read = asyncio.run(go())
    finally:
        if made:
            Sandbox.kill_by_id(made["id"])
    assert final == "done"
    image = outputs[1][0]
    assert image["type"] == "input_image" and image["image_url"].startswith("data:image/png;base64,")
    assert pngs.decode(base64.b64decode(image["image_url"].split(",", 1)[1]))[:2] == (800, 600)
    assert [o[0]["text"] for o in outputs[2:]] == ["clicked left at (400, 300)", "typed 5 characters",
                                                   "pressed ctrl+a", f"killed {made['id']}"]
    assert read[1] == "[tool output omitted]"
