"""The real, unmodified e2b SDK (2.45.1 and 2.63.0, sync and async) against hutch's E2B API.

Each SDK line lives in its own virtual environment (.cache/e2b-<version>, made by scripts/test):
the two cannot share one. tests/e2b_clients/client.py runs there in a subprocess with only
E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL (and PATH) set, and prints JSON for the asserts.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from hutch import RunStep, Sandbox, Template
from tests.conftest import Env

ROOT = Path(__file__).resolve().parent.parent
CLIENT = Path(__file__).resolve().parent / "e2b_clients" / "client.py"
LINES = ("2.45.1", "2.63.0")
MODES = ("sync", "async")
BOTH = [(line, mode) for line in LINES for mode in MODES]


def python_of(line: str) -> Path:
    python = ROOT / ".cache" / f"e2b-{line}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"e2b {line} is not installed in {python.parent.parent} (scripts/test makes it)")
    return python


def e2b_key(env: Env) -> str:
    for line in (env.server.data_dir / "client.env").read_text().splitlines():
        if line.startswith("E2B_API_KEY="):
            return line.split("=", 1)[1]
    raise AssertionError("hutch serve wrote no E2B_API_KEY")


def run_client(env: Env, line: str, scenario: str, mode: str, arg: str = "", key: str | None = None) -> dict[str, Any]:
    variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", "E2B_API_KEY": key or e2b_key(env),
                 "E2B_API_URL": f"{env.url}/e2b", "E2B_SANDBOX_URL": f"{env.url}/e2b/envd"}
    done = subprocess.run([str(python_of(line)), str(CLIENT), scenario, mode, arg], env=variables,
                          capture_output=True, text=True, timeout=300)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0 and lines, f"e2b {line} {scenario} {mode} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_commands_and_the_control_plane(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "commands", mode, f"{line}-{mode}")
    run = out["run"]
    assert (run["stdout"], run["stderr"], run["exit_code"]) == ("out\n1 2\n", "err\n", 0)
    assert "".join(s[2:] for s in run["seen"] if s.startswith("o:")) == "out\n1 2\n"  # streamed to callbacks
    assert [s for s in run["seen"] if s.startswith("e:")] == ["e:err\n"]
    assert out["whoami"] == "root\n/tmp\n" and out["default_user"] == "user\n/home/user\n"
    assert out["exit"] == {"exit_code": 3, "stdout": "failing\n", "error": "exit status 3"}  # CommandExitException
    assert out["background_wait"] == "late\n" and out["stdin"] == "got hello\n"
    assert out["listed"] is True and out["kill"] is True and out["kill_again"] is False
    assert out["killed_wait"] == "CommandExitException"  # killed: exit -1, "signal: killed"
    # Connect-Timeout-Ms: the client gives up, or the server kills the process first
    assert out["deadline"] in ("TimeoutException", "CommandExitException")
    assert out["info"]["state"] == "running" and out["info"]["metadata"]["suite"] == "e2b"
    assert out["listed_ids"] == [out["id"]] and out["list_other"] == 0
    assert out["running"] is True and out["metrics"] == 1
    assert out["killed"] is True and out["killed_twice"] is False
    assert out["connect_gone"] == "SandboxNotFoundException"
    assert Sandbox.list(metadata={"mode": f"{line}-{mode}"}) == []  # killed for hutch too


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_files(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "files", mode)
    assert out["write"] == "/home/user/notes/a.txt" and out["read"] == "hello"
    assert out["read_bytes"] is True and out["read_gzip"] == "zipped" and out["read_many"] == ["one", "two"]
    assert out["missing"] == "FileNotFoundException" and out["bad_user"] == "InvalidArgumentException"
    assert out["list"] == [["1.txt", "file"], ["2.txt", "file"]]
    assert out["info"] == {"name": "a.txt", "path": "/home/user/notes/a.txt", "size": 5, "type": "file",
                           "owner": "user", "permissions": "-rw-r--r--"}
    assert out["exists"] == [True, False] and out["make_dir"] == [True, False]
    assert out["rename"] == "/home/user/notes/b.txt" and out["removed"] is False
    assert ["new.txt", "create"] in out["events"]  # sync: CreateWatcher and polling; async: WatchDir stream


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_pause_then_connect_keeps_files_and_processes(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "pause", mode)
    assert out["paused"] is True and out["state"] == "paused"
    assert out["paused_again"] in (False, None)  # 409: already paused
    assert out["state_after"] == "running" and out["kept"] == "kept\n"
    assert out["counting"] is True and out["process_kept"] is True


def test_one_box_two_clients_and_the_audit_log(env: Env) -> None:
    out = run_client(env, "2.45.1", "create", "sync")
    box = Sandbox.connect(out["id"])
    assert box.metadata == {"from": "e2b"} and box.status == "active"
    assert box.commands.run("cat /tmp/shared").stdout == "from-e2b\n"
    box.commands.run("echo from-hutch > /tmp/from-hutch")
    ops = [(e.op, e.detail) for e in box.get_audit_log().entries]
    assert ("spawn", "/bin/bash -l -c 'echo from-e2b > /tmp/shared'") in ops  # E2B's Start, audited
    again = run_client(env, "2.63.0", "reconnect", "sync", out["id"])
    assert again == {**again, "shared": "from-hutch\n", "killed": True}
    assert Sandbox.list(metadata={"from": "e2b"}) == []


def test_templates_by_name(env: Env) -> None:
    name = f"e2b-tpl-{int(time.time())}"
    template = Template.create(name, steps=[RunStep("echo made-by-a-step > /marker")])
    template.wait_until_ready(timeout_seconds=600)
    try:
        out = run_client(env, "2.63.0", "create", "sync", name)
        assert out["marker"] == "made-by-a-step\n"
        Sandbox.kill_by_id(out["id"])
        assert run_client(env, "2.45.1", "bad_template", "sync")["error"] == "SandboxException"
    finally:
        Template.delete_by_name(name)


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_a_wrong_key_is_refused(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "wrong_key", mode, key="e2b_" + secrets.token_hex(20))
    assert out["error"] == "AuthenticationException"


@pytest.mark.parametrize(("line", "mode"), BOTH)
def test_terminals_input_streams_and_reattaching(env: Env, line: str, mode: str) -> None:
    out = run_client(env, line, "pty", mode)
    assert out["pty"] == {"size": True, "echo": True, "exit": 0}  # Start with a pty, Update, SendInput
    if line != "2.45.1":
        assert out["stream_input"] == "ab\n"  # StreamInput (2.63), then CloseStdin
    assert out["connect"] == "connected\n"  # Connect to a process whose Start stream was dropped


def test_lifecycle_at_the_timeout(env: Env) -> None:
    out = run_client(env, "2.63.0", "lifecycle", "sync")
    assert out["killed"] == "SandboxNotFoundException" and out["paused"] == "paused"
