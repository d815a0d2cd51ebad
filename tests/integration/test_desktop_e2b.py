"""The real, unmodified e2b-desktop SDK (2.7.2) against hutch: the `desktop` template (Xvfb, XFCE,
xdotool, scrot, x11vnc and noVNC under gVisor), every call of the SDK, its stream, and a pause.

The SDK lives in its own virtual environment (.cache/e2b-desktop, made by scripts/test);
tests/integration/e2b_clients/desktop.py runs there in a subprocess with only E2B_API_KEY,
E2B_API_URL and E2B_SANDBOX_URL (and PATH) set, and prints JSON for the asserts. The desktop's root
is built by `hutch build-base --desktop` (scripts/test runs it).
"""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from hutch import Sandbox
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration import pngs
from tests.integration.support import Env, client_result, needs_installed

ROOT = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).resolve().parent / "e2b_clients" / "desktop.py"
VERSION = "2.7.2"


def needs_desktop() -> None:
    needs_installed("the desktop template's root (hutch build-base --desktop)",
                    base_image.is_built(DEFAULT_CACHE_DIR, base_image.DESKTOP))


def run_client(env: Env, scenario: str, arg: str = "") -> dict[str, Any]:
    python = ROOT / ".cache" / "e2b-desktop" / "bin" / "python"
    needs_installed(f"e2b-desktop {VERSION} in {python.parent.parent}", python.exists())
    needs_desktop()
    variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", "E2B_API_KEY": env.server.e2b_key(),
                 "E2B_API_URL": f"{env.url}/e2b", "E2B_SANDBOX_URL": f"{env.url}/e2b/envd"}
    return client_result(python, CLIENT, [scenario, arg], variables, timeout=600)


def kill(out: dict[str, Any]) -> None:
    if "id" in out:
        Sandbox.connect(out["id"]).kill()


def test_every_call_of_the_sdk_and_its_stream(env: Env) -> None:
    out = run_client(env, "drive")
    try:
        assert out["first"]["png"] and out["first"]["size"] > 10_000
        assert out["screen_size"] == [1280, 800]
        assert out["cursor"] == [100, 200]
        assert out["current_window_is_the_note"] is True  # xdg-open opened it in XFCE's editor, focused
        assert out["title_after"].startswith("*note.txt")
        assert out["typed_changed_the_screen"] is True
        # xdotool's keys reached the editor (gedit keeps the file's last newline out of the text)
        assert out["saved"].startswith("a note") and "typed by e2b-desktop\n" in out["saved"]
        assert out["cursor_after_drag"] == [400, 350]
        assert out["terminal_windows"] >= 1  # xfce4-terminal opens its terminal under gVisor (the shim)
        assert out["running_twice"] == "RuntimeError: Stream is already running"
        assert out["no_key"].startswith("RuntimeError: Unable to retrieve stream auth key")
        assert out["passwd_made"] == "yes"
        domain = env.server.client_env("E2B_DOMAIN")
        for url in (out["url"], out["auth_url"]):
            parts = urlsplit(url)
            assert parts.netloc == f"6080-{out['id']}.{domain}" and parts.path == "/vnc.html"
        assert parse_qs(urlsplit(out["auth_url"]).query)["password"] == [out["auth_key"]]
        # the page and noVNC's scripts, over E2B's host form, as a browser fetches them
        ca = ssl.create_default_context(cafile=env.server.client_env("NODE_EXTRA_CA_CERTS"))
        page = httpx.get(out["auth_url"], verify=ca, timeout=30)
        assert page.status_code == 200 and "noVNC" in page.text
        assert "content-security-policy" not in page.headers  # its own origin: its scripts run
        # and the WebSocket the page opens back to the box (websockify), which relays the VNC
        # server's greeting: through the host form's listener, the agent's tunnel and wsports.py
        ws_url = urlsplit(out["auth_url"])._replace(scheme="wss", path="/websockify", query="").geturl()
        with connect(ws_url, ssl=ca, subprotocols=[Subprotocol("binary")], open_timeout=30) as ws:
            greeting = ws.recv(timeout=30)
            assert isinstance(greeting, bytes) and greeting.startswith(b"RFB 003."), greeting
    finally:
        kill(out)


def test_a_paused_desktop_resumes_with_its_windows(env: Env) -> None:
    out = run_client(env, "pause")
    try:
        shots = {k: base64.b64decode(out[k]["data"]) for k in ("empty", "before", "after", "typed_after")}
        typed = pngs.differing(shots["empty"], shots["before"])
        assert typed > 200, "the typing drew nothing"
        # after the resume the screen is the one before the pause, but for a blinking cursor and the clock
        assert pngs.differing(shots["before"], shots["after"]) < typed / 2
        assert pngs.differing(shots["empty"], shots["after"]) > typed / 2  # the text is still there
        assert out["title_after"].startswith("*Untitled")
        assert pngs.differing(shots["after"], shots["typed_after"]) > 50  # and the desktop still takes keys
        assert out["cursor_moves"] == "none"
    finally:
        kill(out)
