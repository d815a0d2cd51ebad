"""The box's `sudo` (hutch/guest/sudo.py) and the agent's service behind it (sudod.py), on this
host: the command line, the environment the command gets, who the service answers (by the
credentials the kernel vouches for), and what becomes of a command whose caller goes away. In a
real box: tests/integration/test_base_box.py."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hutch.guest import launch, sudo, sudod
from hutch.guest import protocol as p

GUEST = Path(sudo.__file__).parent


@pytest.mark.parametrize(("args", "opts", "assignments", "command"), [
    (["id"], {}, {}, ["id"]),
    (["-n", "true"], {"non-interactive": True}, {}, ["true"]),
    (["-nE", "--", "-x"], {"non-interactive": True, "preserve-env": True}, {}, ["-x"]),
    (["-u", "user", "id", "-u"], {"user": "user"}, {}, ["id", "-u"]),
    (["-uuser", "-g", "tty", "id"], {"user": "user", "group": "tty"}, {}, ["id"]),
    (["--user=user", "--preserve-env=A,B", "env"], {"user": "user", "preserve-env": "A,B"}, {}, ["env"]),
    (["-p", "", "FOO=1", "BAR=x=y", "env", "BAZ=2"], {"prompt": ""}, {"FOO": "1", "BAR": "x=y"}, ["env", "BAZ=2"]),
    (["-i"], {"login": True}, {}, []),
    (["-s", "echo", "$HOME"], {"shell": True}, {}, ["echo", "$HOME"]),
])
def test_the_command_line(args: list[str], opts: dict[str, object], assignments: dict[str, str],
                          command: list[str]) -> None:
    assert sudo.parse(args) == (opts, assignments, command)


@pytest.mark.parametrize("args", [["-Z", "id"], ["--bogus", "id"], ["-u"], ["--user"]])
def test_a_bad_command_line_is_a_usage_error(args: list[str]) -> None:
    with pytest.raises(sudo.Usage):
        sudo.parse(args)


def test_the_environment_is_reset_but_for_the_terminal_the_locale_and_the_way_out() -> None:
    caller = {"PATH": "/home/user/bin:/usr/bin", "HOME": "/home/user", "USER": "user", "TERM": "xterm",
              "LC_ALL": "C.UTF-8", "SECRET_TOKEN": "stand-in", "LD_PRELOAD": "/tmp/x.so",
              **launch.PROXY_ENV, "SSL_CERT_FILE": p.CA_BUNDLE, "NODE_EXTRA_CA_CERTS": p.CA_CERT}
    argv, env, _cwd, uid, gid, _groups = sudo.plan({}, {"DEBUG": "1"}, ["env"], caller)
    assert (argv, uid, gid) == (["env"], 0, 0)
    assert env["PATH"] == sudo.SECURE_PATH and env["HOME"] == "/root" and env["USER"] == env["LOGNAME"] == "root"
    assert env["SUDO_UID"] == str(os.getuid()) and env["SUDO_COMMAND"] == "env" and env["DEBUG"] == "1"
    assert "SECRET_TOKEN" not in env and "LD_PRELOAD" not in env
    for name in [*launch.PROXY_ENV, "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "TERM", "LC_ALL"]:
        assert env[name] == caller[name], name
    _argv, env, *_ = sudo.plan({"preserve-env": True}, {}, ["env"], caller)
    assert env["SECRET_TOKEN"] == "stand-in" and env["PATH"] == sudo.SECURE_PATH and env["HOME"] == "/root"
    _argv, env, *_ = sudo.plan({"preserve-env": "SECRET_TOKEN,HOME"}, {}, ["env"], caller)
    assert env["SECRET_TOKEN"] == "stand-in" and env["HOME"] == "/home/user"


def test_every_variable_the_agent_gives_commands_for_the_way_out_is_kept() -> None:
    trust = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT", "NODE_EXTRA_CA_CERTS"]
    assert set(launch.PROXY_ENV) | set(trust) <= set(sudo.KEEP)
    assert set(launch.TRUST_ENV) <= set(trust), "a new trust variable: keep it in sudo.KEEP"


def test_a_shell_gets_the_command_quoted_as_sudo_quotes_it() -> None:
    argv, *_ = sudo.plan({"shell": True}, {}, ["echo", "a b", "$HOME;x"], {"SHELL": "/bin/bash"})
    assert argv == ["/bin/bash", "-c", "echo a\\ b $HOME\\;x"]
    argv, env, cwd, *_ = sudo.plan({"login": True}, {}, [], {})
    assert argv[1:] == ["-l"] and cwd == "/root" and env["HOME"] == "/root"


# --- the agent's service, on this host -----------------------------------------------------------

@pytest.fixture
def service() -> Iterator[str]:
    """The service on a name of its own, answering this process' uid (whatever it is)."""
    name = f"\0hutch-sudo-test-{secrets.token_hex(4)}"
    sudod.SudoService(name, allowed=(os.getuid(),)).start()
    yield name


def client(name: str, argv: list[str], preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen[str]:
    """sudo.py's client in a process of its own (it installs signal handlers), asking the service at
    `name` for `argv` with no change of user (uid 0 in a request means "stay the service's")."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import sudo, json; "
            "sys.exit(sudo.ask_the_agent(json.loads(sys.argv[3]), {'PATH': '/usr/bin:/bin'}, '/', 0, 0, [0], "
            "chr(0) + sys.argv[2]))")
    return subprocess.Popen([sys.executable, "-c", code, str(GUEST), name.lstrip("\0"), json.dumps(argv)], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec_fn)


def test_the_service_runs_the_command_on_the_callers_stdio_and_answers_its_exit(service: str) -> None:
    proc = client(service, ["sh", "-c", "echo out; echo err >&2; exit 7"])
    out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err) == (7, "out\n", "err\n")
    proc = client(service, ["sh", "-c", "kill -TERM $$"])
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM, "a command a signal ended ends its sudo with that signal"
    proc = client(service, ["no-such-program-here"])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "no-such-program-here: command not found" in err


def test_a_caller_not_allowed_is_refused(service: str) -> None:
    name = f"\0hutch-sudo-test-{secrets.token_hex(4)}"
    sudod.SudoService(name, allowed=()).start()
    proc = client(name, ["touch", "/tmp/never-made"])
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "is not in the sudoers file" in err


def running(argv: list[str]) -> bool:
    """Whether a process of exactly this command line runs on this host."""
    want = ("\0".join(argv) + "\0").encode()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes() == want:
                return True
        except OSError:
            pass
    return False


def test_the_callers_signals_reach_the_command_and_its_death_kills_it(service: str, tmp_path: Path) -> None:
    marker, ready = tmp_path / "got", tmp_path / "ready"
    proc = client(service, ["sh", "-c", f"trap 'echo int > {marker}; exit 3' INT; : > {ready}; "
                                        "sleep 30 >/dev/null 2>&1 & wait"])
    deadline = time.monotonic() + 30
    while not ready.exists():  # its trap is set (a signal before it would meet sh's default)
        assert time.monotonic() < deadline and proc.poll() is None, "the command never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 3 and marker.read_text() == "int\n"
    command = [sys.executable, "-c", "import time; time.sleep(60)", f"hutch-sudo-orphan-{secrets.token_hex(4)}"]
    proc = client(service, command)
    deadline = time.monotonic() + 10
    while not running(command):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    proc.kill()  # as a command's deadline kills its process group
    proc.wait()
    deadline = time.monotonic() + 10
    while running(command):
        assert time.monotonic() < deadline, "the command outlived its sudo"
        time.sleep(0.05)


def test_a_request_that_is_not_one_starts_nothing(service: str) -> None:
    for payload in (b"\xff\xff\xff\xff", sudo.LEN.pack(5) + b"nope!", sudo.LEN.pack(2) + b"{}"):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(service)
            s.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", 0, 1, 2)),
                                  (socket.SOL_SOCKET, socket.SCM_CREDENTIALS, sudo.credentials())])
            s.settimeout(15)
            assert s.recv(64) == b"", "closed without an answer"


@pytest.mark.skipif(os.geteuid() != 0, reason="a caller of another uid: needs root to make one")
def test_the_kernel_vouches_for_the_caller_so_a_claimed_uid_is_refused(service: str) -> None:
    """A process of uid 65534 cannot claim the box user's uid (the kernel refuses the message), and
    one that claims nothing is known by its own: either way it gets nothing."""
    name = f"\0hutch-sudo-test-{secrets.token_hex(4)}"
    sudod.SudoService(name, allowed=(p.BOX_UID,)).start()
    code = ("import os, socket, struct, sys\n"
            "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(chr(0) + sys.argv[1])\n"
            "try:\n"
            "    s.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, struct.pack('3i', os.getpid(), 1000, 1000))])\n"
            "    print('claimed')\n"
            "except PermissionError:\n    print('refused by the kernel')\n")
    out = subprocess.run([sys.executable, "-c", code, name.lstrip("\0")], capture_output=True, text=True,
                         timeout=30).stdout
    assert out == "refused by the kernel\n"
    def nobody() -> None:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    proc = client(name, ["id"], preexec_fn=nobody)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1 and "is not in the sudoers file" in err
