"""The `hutch` command as a person uses it: create, ls, exec, cp, info, kill; tables and --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.integration.support import HUTCH, Env
from tests.integration.support import wait_for as wait_until


def hutch(env: Env, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    environ = {**os.environ, "HUTCH_API_KEY": env.key_a, "HUTCH_BASE_URL": env.url}
    return subprocess.run([*HUTCH, *args], input=stdin, capture_output=True,
                          env=environ, timeout=120)


def test_the_cli_round_trip(env: Env, tmp_path: Path) -> None:
    made = hutch(env, "create", "--name", "cli-box", "-m", "via=cli", "-e", "WHO=cli")
    assert made.returncode == 0, made.stderr
    box = made.stdout.decode().strip()
    try:
        table = hutch(env, "ls", "-m", "via=cli").stdout.decode()
        assert table.splitlines()[0].split()[:3] == ["ID", "NAME", "STATUS"] and box in table and "cli-box" in table
        listed = json.loads(hutch(env, "--json", "ls").stdout)
        assert any(b["id"] == box and b["metadata"] == {"via": "cli"} for b in listed)

        run = hutch(env, "exec", box, "--", "echo $WHO; echo oops >&2; exit 5")
        assert (run.returncode, run.stdout, run.stderr) == (5, b"cli\n", b"oops\n")
        run = hutch(env, "exec", box, "--", "ls", "-d", "/home/user")
        assert run.returncode == 0 and run.stdout == b"/home/user\n"
        run = hutch(env, "--json", "exec", box, "--", "echo hi")
        assert json.loads(run.stdout) == {"stdout": "hi\n", "stderr": "", "exit_code": 0}
        run = hutch(env, "exec", box, "--timeout", "1", "--", "sleep 10")
        assert run.returncode == 124 and b"command_timeout" in run.stderr

        local = tmp_path / "in.bin"
        local.write_bytes(bytes(range(256)))
        assert hutch(env, "cp", str(local), f"{box}:/home/user/in.bin").returncode == 0
        out = tmp_path / "out.bin"
        assert hutch(env, "cp", f"{box}:/home/user/in.bin", str(out)).returncode == 0
        assert out.read_bytes() == bytes(range(256))
        assert hutch(env, "cp", "-", f"{box}:/tmp/stdin.txt", stdin=b"piped").returncode == 0
        assert hutch(env, "cp", f"{box}:/tmp/stdin.txt", "-").stdout == b"piped"

        info = json.loads(hutch(env, "--json", "info", box).stdout)
        assert info["id"] == box and info["status"] == "active" and info["name"] == "cli-box"
        assert "status" in hutch(env, "info", box).stdout.decode()
    finally:
        assert hutch(env, "kill", box).returncode == 0
    gone = hutch(env, "info", box)
    assert gone.returncode == 1 and b"not_found" in gone.stderr
    gone = hutch(env, "--json", "info", box)
    assert json.loads(gone.stderr)["error"]["code"] == "not_found"


def test_cli_usage_errors_are_clear(env: Env) -> None:
    r = hutch(env, "cp", "a", "b")
    assert r.returncode != 0 and b"one side must be ID:/path" in r.stderr
    r = hutch(env, "create", "-m", "novalue")
    assert r.returncode != 0 and b"KEY=VALUE" in r.stderr


def _tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30, check=True).stdout


def test_hutch_shell_in_a_real_terminal(env: Env) -> None:
    box = hutch(env, "create", "--name", "shell-box").stdout.decode().strip()
    session = f"hutch-shell-{os.getpid()}"
    command = (f"env HUTCH_API_KEY={env.key_a} HUTCH_BASE_URL={env.url} {sys.executable} -m hutch.cli shell {box}; "
               "echo SHELL-EXITED=$?; sleep 600")
    _tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", command)
    try:
        _tmux("set-option", "-t", session, "status", "off")

        def screen() -> str:
            return _tmux("capture-pane", "-p", "-J", "-S", "-200", "-t", session)

        def keys(*typed: str) -> None:
            _tmux("send-keys", "-t", session, *typed)

        def wait_for(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
            try:
                wait_until(predicate, timeout, what)
            except AssertionError as e:
                raise AssertionError(f"{e}; the screen:\n{screen()}") from None

        wait_for(lambda: "$ " in screen(), timeout=60, what="the box's prompt")
        keys("tty; stty size", "Enter")
        rows, cols = _tmux("display-message", "-p", "-t", session, "#{pane_height} #{pane_width}").split()
        wait_for(lambda: "/dev/pts/" in screen() and f"\n{rows} {cols}" in screen(), what="tty and stty answers")
        _tmux("resize-window", "-t", session, "-x", "100", "-y", "30")
        keys("clear; stty size", "Enter")
        wait_for(lambda: "30 100" in screen(), what="the new size inside the box")
        keys("sleep 300", "Enter")
        wait_for(lambda: hutch(env, "exec", box, "--", "pgrep -x sleep").returncode == 0, what="sleep to run")
        keys("C-c")  # ^C reaches the box's foreground job, not hutch
        keys("echo after-interrupt", "Enter")
        wait_for(lambda: "\nafter-interrupt" in screen(), what="the shell back after ^C")
        keys("exit 5", "Enter")
        wait_for(lambda: "SHELL-EXITED=5" in screen(), what="the exit code passed through")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        hutch(env, "kill", box)


def test_ps_lists_spawned_processes(env: Env) -> None:
    from hutch import Sandbox

    sb = Sandbox.create(name="ps", api_key=env.key_a, base_url=env.url)
    try:
        proc = sb.commands.spawn("sleep 300")
        table = hutch(env, "ps", sb.id).stdout.decode()
        assert table.splitlines()[0].split()[:3] == ["PID", "USER", "TTY"] and "sleep 300" in table
        listed = json.loads(hutch(env, "--json", "ps", sb.id).stdout)
        assert [p["pid"] for p in listed] == [proc.pid]
    finally:
        sb.kill()


def test_egress_rules_at_create_and_the_network_log(env: Env) -> None:
    made = hutch(env, "create", "--name", "strict", "--allow-out", "*.example.test", "--deny-out", "0.0.0.0/0")
    assert made.returncode == 0, made.stderr
    box = made.stdout.decode().strip()
    try:
        # denied before any lookup (deny-all, and nothing names it): no packet leaves this machine
        run = hutch(env, "exec", box, "--", "curl -sS -o /dev/null -w '%{http_code}' http://blocked.invalid/")
        assert run.stdout.decode() == "403"
        table = hutch(env, "netlog", box).stdout.decode()
        assert table.splitlines()[0].split()[:4] == ["TIME", "DESTINATION", "ADDRESS", "VERDICT"]
        assert "blocked.invalid:80" in table and "denied" in table and "deny_out:0.0.0.0/0" in table
        listed = json.loads(hutch(env, "--json", "netlog", box).stdout)
        assert listed[0]["host"] == "blocked.invalid" and listed[0]["ip"] is None
        info = json.loads(hutch(env, "--json", "info", box).stdout)
        assert info["network"] == {"allow_out": ["*.example.test"], "deny_out": ["0.0.0.0/0"]}
    finally:
        hutch(env, "kill", box)
