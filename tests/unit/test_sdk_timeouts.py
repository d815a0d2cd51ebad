"""A data-plane call's own `timeout` (seconds), on the blocking and the asyncio SDK alike, against a
real HTTP server on loopback whose data plane takes requests and never answers: the call raises
SandboxTimeoutError (request_timeout) once its timeout has passed, its retries included, instead of
waiting out the SDK's defaults (300 s for a file's transfer, three retries of a GET)."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hutch import AsyncSandbox, Sandbox, SandboxTimeoutError, ValidationError
from hutch.sdk.codes import SdkCode
from hutch.sdk.sandbox import AsyncCommands, AsyncFiles, Commands, Files

WHEN = "2026-01-02T03:04:05+00:00"
TIMEOUT = 0.3
SLACK = 1.5  # what a loaded machine may add to the timeout before the call returns


@dataclass
class Stalling:
    """hutch's control plane for one box, sb-1, whose data plane reads each request and never answers
    (after the `answers` given, if any: status and body)."""

    url: str
    data_requests: list[str] = field(default_factory=list)
    answers: list[tuple[int, bytes]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def stalling() -> Iterator[Stalling]:
    state: list[Stalling] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            stalling = state[0]
            if self.path.startswith("/data/"):
                stalling.data_requests.append(f"{self.command} {self.path.split('?')[0]}")
                if not stalling.answers:
                    stalling.release.wait(30)  # the client gives up first
                    return
                status, content = stalling.answers.pop(0)
                self.send_response(status)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)
                return
            body = json.dumps({
                "id": "sb-1", "name": "box", "status": "active", "template": "hutch/base", "metadata": {},
                "timeout_seconds": None, "auto_delete_seconds": None, "vcpu_count": 1, "memory_mib": 512,
                "created_at": WHEN, "updated_at": WHEN, "data_plane_url": f"{stalling.url}/data/sb-1",
                "access_token": "token-1"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.append(Stalling(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)  # a quick shutdown
    thread.start()
    try:
        yield state[0]
    finally:
        state[0].release.set()
        server.shutdown()
        server.server_close()


def on_box(front: str, stalling: Stalling, use: Callable[[Any], Any], took: list[float] | None = None) -> Any:
    """`use(box)` on a box of the given front, its result awaited on the async one; how long it
    took (the connect before it not counted) appended to `took`."""
    took = [] if took is None else took
    if front == "sync":
        box = Sandbox.connect("sb-1", api_key="key-1", base_url=stalling.url)
        started = time.monotonic()
        try:
            return use(box)
        finally:
            took.append(time.monotonic() - started)
            box.close()

    async def go() -> Any:
        abox = await AsyncSandbox.connect("sb-1", api_key="key-1", base_url=stalling.url)
        started = time.monotonic()
        try:
            return await use(abox)
        finally:
            took.append(time.monotonic() - started)
            await abox.close()

    return asyncio.run(go())


# Each data-plane call that takes a timeout, and what it asks the data plane for.
CALLS: dict[str, tuple[Callable[[Any, Any], Any], str]] = {
    "files.read": (lambda box, t: box.files.read("/a", timeout=t), "GET /data/sb-1/files"),
    "files.read_text": (lambda box, t: box.files.read_text("/a", timeout=t), "GET /data/sb-1/files"),
    "files.write": (lambda box, t: box.files.write("/a", b"x" * 4096, timeout=t), "PUT /data/sb-1/files"),
    "files.download_dir": (lambda box, t: box.files.download_dir("/d", timeout=t), "GET /data/sb-1/files/zip"),
    "files.list": (lambda box, t: box.files.list("/d", timeout=t), "GET /data/sb-1/files/list"),
    "files.get_info": (lambda box, t: box.files.get_info("/a", timeout=t), "GET /data/sb-1/files/stat"),
    "files.exists": (lambda box, t: box.files.exists("/a", timeout=t), "GET /data/sb-1/files/stat"),
    "files.remove": (lambda box, t: box.files.remove("/a", timeout=t), "DELETE /data/sb-1/files"),
    "files.rename": (lambda box, t: box.files.rename("/a", "/b", timeout=t), "POST /data/sb-1/files/move"),
    "files.make_dir": (lambda box, t: box.files.make_dir("/d", timeout=t), "POST /data/sb-1/files/mkdir"),
    "commands.list": (lambda box, t: box.commands.list(timeout=t), "GET /data/sb-1/commands"),
    "commands.kill": (lambda box, t: box.commands.kill(7, timeout=t), "POST /data/sb-1/commands/7/signal"),
    "create_code_context": (lambda box, t: box.create_code_context(timeout=t), "POST /data/sb-1/code/contexts"),
    "list_code_contexts": (lambda box, t: box.list_code_contexts(timeout=t), "GET /data/sb-1/code/contexts"),
    "restart_code_context": (lambda box, t: box.restart_code_context("c-1", timeout=t),
                             "POST /data/sb-1/code/contexts/c-1/restart"),
    "remove_code_context": (lambda box, t: box.remove_code_context("c-1", timeout=t),
                            "DELETE /data/sb-1/code/contexts/c-1"),
}


@pytest.mark.parametrize("front", ["sync", "async"])
@pytest.mark.parametrize("name", list(CALLS))
def test_a_call_past_its_timeout_raises_once_retries_included(front: str, name: str, stalling: Stalling) -> None:
    use, asked = CALLS[name]
    took: list[float] = []
    with pytest.raises(SandboxTimeoutError) as late:
        on_box(front, stalling, lambda box: use(box, TIMEOUT), took)
    assert late.value.code == SdkCode.REQUEST_TIMEOUT
    assert TIMEOUT * 0.9 <= took[0] < TIMEOUT + SLACK, took
    assert stalling.data_requests == [asked]  # a GET's retry would have started past the timeout: not sent


@pytest.mark.parametrize("front", ["sync", "async"])
def test_a_get_is_still_retried_within_its_timeout(front: str, stalling: Stalling) -> None:
    stalling.answers = [(503, b"busy"), (200, b"hello")]
    assert on_box(front, stalling, lambda box: box.files.read("/a", timeout=10)) == b"hello"
    assert stalling.data_requests == ["GET /data/sb-1/files"] * 2


@pytest.mark.parametrize("front", ["sync", "async"])
@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "5", True])
def test_a_timeout_that_is_not_a_positive_number_is_refused_before_any_request(front: str, bad: Any,
                                                                               stalling: Stalling) -> None:
    with pytest.raises(ValidationError) as err:
        on_box(front, stalling, lambda box: box.files.read("/a", timeout=bad))
    assert err.value.code == SdkCode.INVALID_ARGUMENT and stalling.data_requests == []


@pytest.mark.parametrize("cls", [Files, AsyncFiles, Commands, AsyncCommands, Sandbox, AsyncSandbox],
                         ids=lambda cls: cls.__name__)
def test_every_data_plane_call_takes_a_keyword_timeout_in_seconds(cls: type) -> None:
    """As the Superserve SDK's `files.read(path, *, timeout=None)`, on every call that is one request
    to the data plane (a command's or code's run has its own run time limit; a watch is open-ended)."""
    names = {Files: ["write", "read", "read_text", "download_dir", "list", "get_info", "exists", "remove", "rename",
                     "make_dir"],
             Commands: ["list", "kill"],
             Sandbox: ["create_code_context", "list_code_contexts", "restart_code_context", "remove_code_context"]}
    blocking = {AsyncFiles: Files, AsyncCommands: Commands, AsyncSandbox: Sandbox}.get(cls, cls)
    for name in names[blocking]:
        parameter = inspect.signature(getattr(cls, name)).parameters.get("timeout")
        assert parameter is not None, f"{cls.__name__}.{name}"
        assert (parameter.kind, parameter.default) == (inspect.Parameter.KEYWORD_ONLY, None), f"{cls.__name__}.{name}"
