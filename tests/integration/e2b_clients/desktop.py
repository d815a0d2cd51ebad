"""Drives the real, unmodified e2b-desktop SDK (2.7.2) against hutch and prints what happened as one
JSON object.

Run by tests/integration/test_desktop_e2b.py with the venv scripts/test makes for it
(.cache/e2b-desktop), with only E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL set:
`python desktop.py <scenario> [arg]`. Standard library and the SDK only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from e2b_desktop import Sandbox  # type: ignore[import-not-found]

SCENARIO = sys.argv[1]
ARG = sys.argv[2] if len(sys.argv) > 2 else ""
out: dict[str, Any] = {}


def caught(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:300]
    return "none"


def shot(sbx: Any, keep: bool = False) -> dict[str, Any]:
    """A screenshot's size and digest, whether it is a PNG, and with `keep` the PNG itself (base64)."""
    data = bytes(sbx.screenshot())
    return {"png": data[:8] == b"\x89PNG\r\n\x1a\n", "size": len(data), "sha": hashlib.sha256(data).hexdigest(),
            **({"data": base64.b64encode(data).decode()} if keep else {})}


def until(what: str, check: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def windows(sbx: Any, app: str) -> list[str]:
    try:
        return [w for w in sbx.get_application_windows(app) if w]
    except Exception:
        return []


def drive() -> None:
    """Create at a resolution, then every call of the SDK: the editor gets text typed into it."""
    started = time.monotonic()
    sbx = Sandbox.create(resolution=(1280, 800), timeout=600)
    out["create_seconds"] = time.monotonic() - started
    out["id"] = sbx.sandbox_id
    started = time.monotonic()
    out["first"] = shot(sbx)
    out["first_screenshot_seconds"] = time.monotonic() - started
    out["screen_size"] = list(sbx.get_screen_size())
    sbx.move_mouse(100, 200)
    out["cursor"] = list(sbx.get_cursor_position())
    sbx.files.write("/home/user/note.txt", "a note\n")
    sbx.open("/home/user/note.txt")  # xdg-open: the desktop's text editor

    def note_windows() -> list[str]:
        found = sbx.commands.run("xdotool search --onlyvisible --name note.txt || true").stdout.split()
        return [w for w in found if "note.txt" in sbx.get_window_title(w)]
    until("the note's window", lambda: bool(note_windows()))
    window = note_windows()[0]
    out["current_window_is_the_note"] = sbx.get_current_window_id() == window
    before = shot(sbx)
    sbx.left_click(640, 400)
    sbx.press(["ctrl", "end"])
    sbx.write("typed by e2b-desktop")
    sbx.press("enter")
    until("the edit", lambda: sbx.get_window_title(window).startswith("*"))
    out["title_after"] = sbx.get_window_title(window)
    out["typed_changed_the_screen"] = shot(sbx)["sha"] != before["sha"]
    sbx.press(["ctrl", "s"])
    until("the save", lambda: "typed by e2b-desktop" in sbx.files.read("/home/user/note.txt"))
    out["saved"] = sbx.files.read("/home/user/note.txt")
    sbx.double_click(640, 400)
    sbx.right_click(640, 400)
    sbx.press("escape")
    sbx.middle_click()
    sbx.scroll("down", 3)
    sbx.scroll("up", 1)
    sbx.drag((200, 300), (400, 350))
    sbx.mouse_press("left")
    sbx.mouse_release("left")
    sbx.wait(100)
    out["cursor_after_drag"] = list(sbx.get_cursor_position())
    sbx.launch("xfce4-terminal")
    until("the terminal", lambda: bool(windows(sbx, "xfce4-terminal")))
    out["terminal_windows"] = len(windows(sbx, "xfce4-terminal"))
    # the stream, without a password and then with one
    sbx.stream.start()
    out["url"] = sbx.stream.get_url()
    out["running_twice"] = caught(sbx.stream.start)
    out["no_key"] = caught(sbx.stream.get_auth_key)
    sbx.stream.stop()
    sbx.stream.start(require_auth=True)
    key = sbx.stream.get_auth_key()
    out["auth_url"] = sbx.stream.get_url(auth_key=key)
    out["auth_key"] = key
    out["passwd_made"] = sbx.commands.run("test -s ~/.vnc/passwd && echo yes").stdout.strip()
    out["last"] = shot(sbx)


def pause() -> None:
    """Text typed into an editor, a pause, a resume: the text is on the screen still."""
    sbx = Sandbox.create(timeout=600)
    out["id"] = sbx.sandbox_id
    sbx.commands.run("mousepad", background=True, timeout=0)
    until("the editor", lambda: bool(windows(sbx, "mousepad")))
    time.sleep(1)  # drawn
    out["empty"] = shot(sbx, keep=True)
    sbx.left_click(500, 400)
    sbx.write("kept across a pause")
    until("the edit", lambda: sbx.get_window_title(windows(sbx, "mousepad")[0]).startswith("*"))
    out["before"] = shot(sbx, keep=True)
    out["paused"] = sbx.pause()
    again = Sandbox.connect(sbx.sandbox_id)
    out["after"] = shot(again, keep=True)
    out["title_after"] = again.get_window_title(windows(again, "mousepad")[0])
    again.write(" and after")
    out["typed_after"] = shot(again, keep=True)
    out["cursor_moves"] = caught(lambda: again.move_mouse(10, 10))


SCENARIOS = {"drive": drive, "pause": pause}

if __name__ == "__main__":
    SCENARIOS[SCENARIO]()
    print(json.dumps(out, default=str))
