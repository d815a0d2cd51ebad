"""Drives an unmodified e2b SDK of any line (1.x, 2.x; the code interpreter's, 1.x and 2.x) against
hutch through E2B's host form alone, and prints what happened as one JSON object.

Run by tests/integration/test_e2b_domain.py with one pinned venv per line, with only E2B_DOMAIN,
E2B_API_KEY and SSL_CERT_FILE (and PATH) set: `python domain.py <scenario>`. Standard library and
the SDK only; written to the calls every line has.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import sys
import urllib.error
import urllib.request
from typing import Any

SCENARIO = sys.argv[1]
out: dict[str, Any] = {}


def create(cls: Any, **kwargs: Any) -> Any:
    """`Sandbox.create()` (2.x), or the constructor (1.x, which has no create)."""
    return cls.create(**kwargs) if hasattr(cls, "create") else cls(**kwargs)


def basics(cls: Any) -> None:
    """Create, a command, a file both ways, a second client by id, a port URL, kill."""
    sbx = create(cls)
    try:
        out["id"] = sbx.sandbox_id
        out["envd_host"] = sbx.get_host(49983)
        out["echo"] = sbx.commands.run("echo hello from $(whoami)").stdout
        sbx.files.write("/tmp/note.txt", "written by the SDK")
        out["read"] = sbx.files.read("/tmp/note.txt")
        out["cat"] = sbx.commands.run("cat /tmp/note.txt").stdout
        # a second client by id (e2b before 2.25.1 then sends no E2b-Sandbox-Id: the token names the box)
        again = cls.connect(sbx.sandbox_id)
        out["connected"] = again.commands.run("cat /tmp/note.txt").stdout
        # a server in the box, reached at its port's host (a box is public unless made otherwise)
        sbx.commands.run("cd /tmp && python3 -m http.server 8000 >/dev/null 2>&1", background=True)
        for _ in range(100):
            if "LISTEN" in sbx.commands.run("ss -ltn 'sport = :8000' || true").stdout:
                break
        with urllib.request.urlopen(f"https://{sbx.get_host(8000)}/note.txt", timeout=30) as r:
            out["port"] = r.read().decode()
    finally:
        out["killed"] = sbx.kill() if callable(getattr(sbx, "kill", None)) else None


def run_code(cls: Any) -> None:
    sbx = create(cls)
    try:
        execution = sbx.run_code("x = 6 * 7\nprint('printed')\nx")
        out["text"] = execution.text
        out["stdout"] = execution.logs.stdout
        out["error"] = execution.error.name if execution.error else None
        out["echo"] = sbx.commands.run("echo box").stdout
    finally:
        sbx.kill()


def serve_and_wait(sbx: Any) -> None:
    sbx.commands.run("cd /tmp && echo awake > w.txt && python3 -m http.server 8000 >/dev/null 2>&1", background=True)
    for _ in range(100):
        if "LISTEN" in sbx.commands.run("ss -ltn 'sport = :8000' || true").stdout:
            return


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return f"{r.status} {r.read().decode().strip()}"
    except urllib.error.HTTPError as e:
        return f"{e.code}"


def auto_resume(cls: Any) -> None:
    """lifecycle auto_resume (2.63): on, a request to a port's URL wakes a paused box, its process
    still serving; off, neither that nor an envd call does, and connect does."""
    waking = cls.create(timeout=120, lifecycle={"on_timeout": "pause", "auto_resume": True})
    sleeping = cls.create(timeout=120, lifecycle={"on_timeout": "pause", "auto_resume": False})
    try:
        for sbx in (waking, sleeping):
            serve_and_wait(sbx)
            sbx.pause()
        out["paused"] = [waking.get_info().state, sleeping.get_info().state]
        out["woken_by_port"] = fetch(f"https://{waking.get_host(8000)}/w.txt")
        out["waking_after"] = waking.get_info().state
        out["not_woken_by_port"] = fetch(f"https://{sleeping.get_host(8000)}/w.txt")
        try:
            sleeping.commands.run("echo no")
            out["envd_on_paused"] = "ran"
        except Exception as e:  # the SDK's error for a paused box: its name is enough
            out["envd_on_paused"] = type(e).__name__
        out["sleeping_after"] = sleeping.get_info().state
        again = cls.connect(sleeping.sandbox_id)
        out["after_connect"] = fetch(f"https://{again.get_host(8000)}/w.txt")
    finally:
        waking.kill()
        sleeping.kill()


def camel() -> None:
    """camel-ai's E2BInterpreter (it pins e2b-code-interpreter < 2), configured by the environment only."""
    from camel.interpreters import E2BInterpreter  # type: ignore[import-not-found]

    interpreter = E2BInterpreter(require_confirm=False)
    try:
        out["python"] = interpreter.run("print(6 * 7)", "python")
    finally:
        interpreter.__del__()


def main() -> None:
    out["e2b"] = importlib.metadata.version("e2b")
    if SCENARIO == "basics":
        basics(importlib.import_module("e2b").Sandbox)
    elif SCENARIO == "run_code":
        out["code_interpreter"] = importlib.metadata.version("e2b-code-interpreter")
        run_code(importlib.import_module("e2b_code_interpreter").Sandbox)
    elif SCENARIO == "auto_resume":
        auto_resume(importlib.import_module("e2b").Sandbox)
    elif SCENARIO == "camel":
        camel()
    else:
        raise SystemExit(f"no scenario {SCENARIO}")
    print(json.dumps(out))


main()
