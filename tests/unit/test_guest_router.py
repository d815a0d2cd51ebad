"""The agent's routes on a real socket pair, as the host reaches them: each refusal answered under its
code's one status (protocol.ERROR_STATUS), with the statuses the host has always had from them, and
a connection that goes on serving after a refusal."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from hutch.guest import fsops
from hutch.guest import launch as L
from hutch.guest import protocol as p
from hutch.guest.procs import ProcTable
from hutch.guest.router import Router
from hutch.guest.routes_procs import MAX_STDIN_BODY
from hutch.guest.spawner import Spawner

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the agent's spawner drops to the box user: needs root")


class Host:
    """The host's end of one channel connection to a Router."""

    def __init__(self) -> None:
        self.sock, agent = socket.socketpair()
        self.sock.settimeout(10)
        self.file = self.sock.makefile("rb")
        self.serving = threading.Thread(target=Router, args=(agent, "", None), daemon=True)
        self.serving.start()

    def ask(self, method: str, target: str, body: bytes | dict[str, Any] | list[Any] | None = None
            ) -> tuple[int, dict[str, str], bytes]:
        data = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
        head = f"{method} {target} HTTP/1.1\r\nContent-Length: {len(data)}\r\n\r\n".encode("latin-1")
        self.sock.sendall(head + data)
        return self.answer()

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        status = int(self.file.readline().split()[1])
        headers: dict[str, str] = {}
        while (line := self.file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int(self.file.readline().strip(), 16):
                body += self.file.read(size)
                self.file.readline()
            self.file.readline()
            return status, headers, body
        return status, headers, self.file.read(int(headers.get("content-length", "0")))

    def close(self) -> None:
        self.file.close()
        self.sock.close()
        self.serving.join(10)


@pytest.fixture
def host() -> Iterator[Host]:
    h = Host()
    yield h
    h.close()


@pytest.fixture
def procs() -> Iterator[ProcTable]:
    """The table the routes use, empty; with the box's spawner where the test runs as root."""
    spawner = Spawner(p.BOX_UID, p.BOX_GID) if os.geteuid() == 0 else cast(Spawner, None)
    Router.spawner, Router.procs = spawner, ProcTable(spawner)
    yield Router.procs
    if spawner is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(spawner.pid, signal.SIGKILL)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def refused(answer: tuple[int, dict[str, str], bytes]) -> tuple[int, str]:
    status, headers, body = answer
    err = json.loads(body)
    assert headers["content-type"] == "application/json" and isinstance(err["message"], str) and err["message"]
    assert status == p.ERROR_STATUS[err["code"]]  # the code's one status
    return status, err["code"]


@pytest.mark.parametrize(("method", "target", "body", "expected"), [
    ("GET", "/v1/nope", None, (404, p.ERR_NO_ROUTE)),
    ("PUT", p.EXEC, None, (404, p.ERR_NO_ROUTE)),
    ("POST", p.HEALTH, b"{}", (404, p.ERR_NO_ROUTE)),
    ("GET", f"{p.PROCS}/x1", None, (404, p.ERR_NO_ROUTE)),
    ("GET", f"{p.PROCS}/1234567890", None, (404, p.ERR_NO_ROUTE)),
    ("GET", f"{p.PROCS}/\xb2", None, (400, p.ERR_BAD_REQUEST)),  # a digit to isdigit(), not to int()
    ("GET", f"{p.PROCS}/424242", None, (404, p.ERR_NO_PROCESS)),
    ("POST", f"{p.PROCS}/424242/{p.PROC_STDIN}", b"x", (404, p.ERR_NO_PROCESS)),
    ("POST", p.EXEC, b"{", (400, p.ERR_BAD_REQUEST)),
    ("POST", p.EXEC, {"cmd": 1}, (400, p.ERR_BAD_REQUEST)),
    ("POST", p.PROCS, ["cmd"], (400, p.ERR_BAD_REQUEST)),
    ("POST", p.PROCS, {"cmd": "true", "pty": {"rows": 0, "cols": 80}}, (400, p.ERR_BAD_REQUEST)),
    ("GET", f"{p.FILES}?path=relative", None, (400, p.ERR_BAD_PATH)),
    ("GET", f"{p.FS_STAT}?path=/a/../b", None, (400, p.ERR_BAD_PATH)),
    ("GET", f"{p.FS_STAT}?path=/no/such/thing/here&user=root", None, (404, p.ERR_NOT_FOUND)),
    ("GET", f"{p.FILES}?path={{tmp}}&user=root", None, (400, p.ERR_IS_DIR)),
    ("GET", f"{p.FILES}?path=/dev/null&user=root", None, (400, p.ERR_NOT_REGULAR)),
    ("GET", f"{p.FS_LIST}?path={{tmp}}&depth=0&user=root", None, (400, p.ERR_BAD_REQUEST)),
    ("GET", f"{p.FS_LIST}?path={{tmp}}/file&user=root", None, (400, p.ERR_NOT_DIR)),
    ("PUT", f"{p.FILES}?path={{tmp}}&user=root", b"data", (400, p.ERR_IS_DIR)),
    ("PUT", f"{p.FILES}?path={{tmp}}/file/under&user=root", b"data", (400, p.ERR_NOT_DIR)),
    ("PUT", f"{p.FILES}?path={{tmp}}/new&metadata=[]", b"data", (400, p.ERR_BAD_REQUEST)),
    ("POST", p.FS_MKDIR, b"[1]", (400, p.ERR_BAD_REQUEST)),
    ("POST", p.FS_MKDIR, {"path": 5}, (400, p.ERR_BAD_PATH)),
    ("POST", p.FS_MOVE, {"source": "/a", "destination": "b"}, (400, p.ERR_BAD_PATH)),
    ("POST", p.FS_MKDIR, {"path": "{tmp}/file", "user": "root"}, (409, p.ERR_EXISTS)),
    ("POST", p.FS_REMOVE, {"path": "{tmp}/gone", "user": "root"}, (404, p.ERR_NOT_FOUND)),
    ("POST", f"{p.TUNNEL}?port=0", None, (400, p.ERR_BAD_REQUEST)),
    ("POST", f"{p.TUNNEL}?port=65536", None, (400, p.ERR_BAD_REQUEST)),
    ("POST", f"{p.TUNNEL}?port={{closed}}", None, (502, p.ERR_PORT_CLOSED)),
])
def test_each_refusal_is_answered_under_its_codes_one_status(
        host: Host, procs: ProcTable, tmp_path: Path, method: str, target: str,
        body: bytes | dict[str, Any] | list[Any] | None, expected: tuple[int, str]) -> None:
    (tmp_path / "file").write_text("x")
    fill = {"tmp": str(tmp_path), "closed": str(closed_port())}
    target = target.format(**fill)
    if isinstance(body, dict):
        body = {k: v.format(**fill) if isinstance(v, str) else v for k, v in body.items()}
    assert refused(host.ask(method, target, body)) == expected
    status, _, answer = host.ask("GET", p.HEALTH)  # the connection serves on
    assert status == 200 and json.loads(answer)["version"] == p.VERSION


def test_a_refused_write_leaves_no_descriptor_behind(host: Host, procs: ProcTable, tmp_path: Path) -> None:
    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    host.ask("GET", p.HEALTH)
    before = open_fds()
    for _ in range(20):
        assert refused(host.ask("PUT", f"{p.FILES}?path={tmp_path}&user=root", b"data")) == (400, p.ERR_IS_DIR)
    assert open_fds() <= before + 2


def test_a_write_and_a_read_of_a_file_answer_200(host: Host, procs: ProcTable, tmp_path: Path) -> None:
    status, _, body = host.ask("PUT", f"{p.FILES}?path={tmp_path}/f&user=root&metadata=" + '{"k":"v"}', b"hello")
    assert status == 200 and json.loads(body) == {"path": f"{tmp_path}/f", "size": 5, "metadata": 1}
    assert host.ask("GET", f"{p.FILES}?path={tmp_path}/f&user=root")[::2] == (200, b"hello")
    status, _, body = host.ask("GET", f"{p.FS_LIST}?path={tmp_path}&user=root")
    assert status == 200 and [e["name"] for e in json.loads(body)["entries"]] == ["f"]


def test_a_bug_answers_agent_error(host: Host, procs: ProcTable, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(path: str, trust_all: bool) -> dict[str, Any]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(fsops, "stat_path", broken)
    status, _, body = host.ask("GET", f"{p.FS_STAT}?path=/&user=root")
    assert (status, json.loads(body)) == (p.ERROR_STATUS[p.ERR_AGENT], {"code": p.ERR_AGENT, "message": "RuntimeError"})
    assert status == 500


def test_a_command_that_cannot_start_is_command_start_failed(host: Host, procs: ProcTable,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """503 from a spawn; from an exec (whose stream has begun), an error event with the same code."""
    def out_of_pids(*_args: Any, **_kwargs: Any) -> L.Launched:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(L, "launch", out_of_pids)
    assert refused(host.ask("POST", p.PROCS, {"cmd": "true", "cwd": "/"})) == (503, p.ERR_START_FAILED)
    status, _, body = host.ask("POST", p.EXEC, {"cmd": "true", "cwd": "/"})
    events = [json.loads(line) for line in body.splitlines()]
    assert status == 200 and [(e["t"], e["code"]) for e in events] == [(p.EVENT_ERROR, p.ERR_START_FAILED)]
    assert "could not start" in events[0]["message"]


@needs_root
def test_a_spawned_process_refusals(host: Host, procs: ProcTable) -> None:
    assert refused(host.ask("POST", p.PROCS, {"cmd": "true", "cwd": "/no/such/dir"})) == (400, p.ERR_BAD_CWD)
    status, _, body = host.ask("POST", p.PROCS, {"cmd": "cat >/dev/null", "cwd": "/"})
    assert status == 200
    pid = json.loads(body)["pid"]
    one = f"{p.PROCS}/{pid}"
    try:
        too_much = b"x" * (MAX_STDIN_BODY + 1)
        assert refused(host.ask("POST", f"{one}/{p.PROC_STDIN}", too_much)) == (413, p.ERR_BODY_TOO_LARGE)
        assert refused(host.ask("POST", f"{one}/{p.PROC_RESIZE}", {"rows": 10, "cols": 10})) == (400, p.ERR_NOT_TTY)
        assert refused(host.ask("POST", f"{one}/{p.PROC_RESIZE}", {"rows": 0})) == (400, p.ERR_BAD_REQUEST)
        assert refused(host.ask("POST", f"{one}/{p.PROC_SIGNAL}", {"signal": 0})) == (400, p.ERR_BAD_REQUEST)
        assert refused(host.ask("POST", f"{one}/{p.PROC_SIGNAL}", b"{")) == (400, p.ERR_BAD_REQUEST)
        assert refused(host.ask("POST", f"{one}/nope", b"")) == (404, p.ERR_NO_ROUTE)
        assert refused(host.ask("GET", f"{one}/nope")) == (404, p.ERR_NO_ROUTE)
        assert host.ask("POST", f"{one}/{p.PROC_STDIN}", b"hi")[0] == 200
        assert host.ask("POST", f"{one}/{p.PROC_STDIN_CLOSE}", b"")[0] == 200
        assert refused(host.ask("POST", f"{one}/{p.PROC_STDIN}", b"more")) == (409, p.ERR_STDIN_CLOSED)
        status, _, body = host.ask("GET", f"{one}/{p.PROC_EVENTS}")
        assert status == 200 and json.loads(body.splitlines()[-1])["t"] == p.EVENT_EXIT
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


@needs_root
def test_too_many_spawned_processes_is_429(host: Host, procs: ProcTable, monkeypatch: pytest.MonkeyPatch) -> None:
    from hutch.guest import procs as procs_module

    monkeypatch.setattr(procs_module, "MAX_RUNNING", 1)
    status, _, body = host.ask("POST", p.PROCS, {"cmd": "sleep 30", "cwd": "/"})
    assert status == 200
    pid = json.loads(body)["pid"]
    try:
        assert refused(host.ask("POST", p.PROCS, {"cmd": "true", "cwd": "/"})) == (429, p.ERR_TOO_MANY_PROCS)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_the_channels_modules_name_codes_never_statuses() -> None:
    """A status is protocol.ERROR_STATUS's to give: the channel's modules write only 200 themselves."""
    import ast

    guest = Path(p.__file__).parent
    modules = ["channel.py", "exchange.py", "listener.py", "router.py", "procs.py", "launch.py",
               *(f.name for f in guest.glob("routes_*.py"))]
    for name in modules:
        for node in ast.walk(ast.parse((guest / name).read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "send_response", "_send_json"):
                status = node.args[0]
                assert not isinstance(status, ast.Constant) or status.value == 200, (name, node.lineno)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "Refusal":
                assert not any(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in node.args), (name, node.lineno)
