"""The SDK's calls against a scripted server (httpx.MockTransport, no hutch server): what each sends,
how its answer is read, which errors it raises, what is retried; each test on the blocking and the
asyncio SDK alike."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from hutch import (
    AsyncSandbox,
    AsyncTemplate,
    AuthenticationError,
    BuildError,
    ConflictError,
    Events,
    NetworkConfig,
    NotFoundError,
    RateLimitError,
    RunStep,
    Sandbox,
    SandboxError,
    SandboxTimeoutError,
    Secret,
    SecretAuth,
    ServerError,
    Template,
    ValidationError,
)
from hutch.sdk import config, flow
from hutch.sdk.codes import SdkCode, ServerCode
from hutch.sdk.config import ConnectionConfig
from hutch.sdk.sandbox import AsyncCommands, AsyncFiles, AsyncWatchHandle

BASE = "http://hutch.test"
DATA = f"{BASE}/data/sb-1"
WHEN = "2026-01-02T03:04:05+00:00"
SANDBOX = {"id": "sb-1", "name": "box", "status": "active", "template": "hutch/base", "metadata": {"team": "a"},
           "timeout_seconds": None, "auto_delete_seconds": None, "vcpu_count": 1, "memory_mib": 512,
           "created_at": WHEN, "updated_at": WHEN, "preview_url_template": "https://{port}-sb-1.preview.test",
           "data_plane_url": DATA, "access_token": "token-1"}
BUILD = {"id": "b-1", "template_id": "t-1", "template": "py", "status": "running", "error": None, "steps_total": 1,
         "steps_cached": 0, "created_at": WHEN, "started_at": WHEN, "finished_at": None}
TEMPLATE = {"id": "t-1", "name": "py", "system": False, "status": "building", "from": "hutch/base", "steps": [{"run": "true"}],
            "ready_timeout_seconds": 60, "vcpu": 1, "memory_mib": 512, "disk_mib": 2048, "env": {}, "created_at": WHEN,
            "latest_build": BUILD}
Answer = httpx.Response | Callable[[httpx.Request], httpx.Response]


def error(status: int, code: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": f"{code}!"}})


def events(*pairs: tuple[str, dict[str, Any]]) -> httpx.Response:
    """A server-sent event stream, with a keep-alive first."""
    text = ": keep-alive\n\n" + "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in pairs)
    return httpx.Response(200, content=text.encode(), headers={"Content-Type": "text/event-stream"})


class Script:
    """A scripted hutch server: answers by method and path, in order (the last one again once
    they run out), and keeps every request it was sent."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Answer]] = {}
        self.seen: list[httpx.Request] = []
        self.transport = httpx.MockTransport(self._answer)

    def on(self, method: str, url: str, *answers: Answer) -> None:
        self.routes[method, url] = list(answers)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        answers = self.routes.get((request.method, str(request.url.copy_with(query=None))))
        if not answers:
            return error(404, ServerCode.NOT_FOUND)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if callable(answer):
            return answer(request)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.read())  # a fresh copy each time

    def sent(self, method: str, url: str) -> list[httpx.Request]:
        return [r for r in self.seen if r.method == method and str(r.url.copy_with(query=None)) == url]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Script:
    """The script, carrying every request the SDK makes (its configuration gets the transport)."""
    script = Script()
    resolve = ConnectionConfig.resolve

    def with_transport(api_key: str | None = None, base_url: str | None = None) -> ConnectionConfig:
        return dataclasses.replace(resolve(api_key or "key-1", base_url or BASE), transport=script.transport)

    monkeypatch.setattr(ConnectionConfig, "resolve", staticmethod(with_transport))
    monkeypatch.setattr(flow, "backoff", lambda attempt: 0.0)  # retries without the wait
    return script


class Blocking:
    """An async SDK object whose every call is run to its end, so one test body serves both SDKs."""

    WRAP = (AsyncSandbox, AsyncCommands, AsyncFiles, AsyncTemplate)

    def __init__(self, target: Any, runner: asyncio.Runner) -> None:
        self._target, self._runner = target, runner

    def _wrap(self, value: Any) -> Any:
        return Blocking(value, self._runner) if isinstance(value, self.WRAP) else value

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return self._wrap(value)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = value(*map(_unwrapped, args), **{k: _unwrapped(v) for k, v in kwargs.items()})
            if inspect.isawaitable(result):
                result = self._runner.run(_awaited(result))
            return self._wrap(result)

        return call

    def drain(self, handle: AsyncWatchHandle) -> list[Any]:
        async def read() -> list[Any]:
            return [item async for item in handle]
        return self._runner.run(read())


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _unwrapped(value: Any) -> Any:
    return value._target if isinstance(value, Blocking) else value


@pytest.fixture(params=["sync", "async"])
def fronts(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """(Sandbox, Template), or their async forms driven to completion call by call."""
    if request.param == "sync":
        yield Sandbox, Template
        return
    with asyncio.Runner() as runner:
        yield Blocking(AsyncSandbox, runner), Blocking(AsyncTemplate, runner)


@pytest.fixture
def sdk(fronts: tuple[Any, Any]) -> Any:
    return fronts[0]


@pytest.fixture
def box(sdk: Any, server: Script) -> Any:
    server.on("POST", f"{BASE}/v1/sandboxes", httpx.Response(201, json=SANDBOX))
    return sdk.create("box")


def body(request: httpx.Request) -> Any:
    return json.loads(request.content)


def drain(sdk: Any, handle: Any) -> list[Any]:
    return sdk.drain(handle) if isinstance(handle, AsyncWatchHandle) else list(handle)


# --- the control plane --------------------------------------------------------------------------------

def test_create_sends_what_is_given_and_returns_the_sandbox(sdk: Any, server: Script) -> None:
    server.on("POST", f"{BASE}/v1/sandboxes", httpx.Response(201, json=SANDBOX))
    sb = sdk.create("box", metadata={"team": "a"}, network=NetworkConfig(allow_out=["*.example.com"]),
                    timeout_seconds=60)
    (request,) = server.seen
    assert body(request) == {"name": "box", "metadata": {"team": "a"}, "timeout_seconds": 60,
                             "network": {"allow_out": ["*.example.com"], "deny_out": []}}
    assert request.headers["Authorization"] == "Bearer key-1"
    assert (sb.id, sb.name, sb.status, sb.metadata) == ("sb-1", "box", "active", {"team": "a"})
    assert sb.get_preview_url(8080) == "https://8080-sb-1.preview.test"


def test_create_from_a_template_object_sends_its_name(fronts: tuple[Any, Any], server: Script) -> None:
    sdk, template = fronts
    server.on("GET", f"{BASE}/v1/templates/py", httpx.Response(200, json=TEMPLATE))
    server.on("POST", f"{BASE}/v1/sandboxes", httpx.Response(201, json=SANDBOX))
    sdk.create("box", from_template=template.get("py"))
    assert body(server.sent("POST", f"{BASE}/v1/sandboxes")[0])["from_template"] == "py"


def test_connect_takes_a_fresh_data_plane_token(sdk: Any, server: Script) -> None:
    server.on("POST", f"{BASE}/v1/sandboxes/sb-1/connect", httpx.Response(200, json={**SANDBOX, "access_token": "t2"}))
    server.on("POST", f"{DATA}/commands/run", events(("exit", {"exit_code": 0, "timed_out": False})))
    sb = sdk.connect("sb-1")
    sb.commands.run("true")
    assert server.sent("POST", f"{DATA}/commands/run")[0].headers["X-Access-Token"] == "t2"


def test_list_filters_by_metadata_and_status(sdk: Any, server: Script) -> None:
    server.on("GET", f"{BASE}/v1/sandboxes", httpx.Response(200, json=[SANDBOX, {**SANDBOX, "id": "sb-2"}]))
    found = sdk.list(metadata={"team": "a", "run": "7"}, status="active")
    assert [info.id for info in found] == ["sb-1", "sb-2"] and found[0].metadata == {"team": "a"}
    assert dict(server.seen[0].url.params) == {"metadata": "team=a&run=7", "status": "active"}


def test_a_sandbox_that_is_gone_is_killed_quietly(box: Any, server: Script) -> None:
    server.on("DELETE", f"{BASE}/v1/sandboxes/sb-1", error(404, ServerCode.NOT_FOUND))
    box.kill()
    assert len(server.sent("DELETE", f"{BASE}/v1/sandboxes/sb-1")) == 1


def test_the_audit_log_by_id_is_on_both_fronts(sdk: Any, server: Script) -> None:
    entry = {"id": 9, "at": WHEN, "actor": "me", "op": "exec", "detail": "ls", "exit_code": 0, "outcome": "ok"}
    server.on("GET", f"{BASE}/v1/sandboxes/sb-1/audit", httpx.Response(200, json={"entries": [entry],
                                                                                  "next_before": None}))
    page = sdk.get_audit_log_by_id("sb-1", limit=5, before=10)
    assert page.entries[0].detail == "ls" and page.entries[0].at.year == 2026 and page.next_before is None
    assert dict(server.seen[0].url.params) == {"limit": "5", "before": "10"}


def test_preview_ports_are_checked_then_published(box: Any, server: Script) -> None:
    published = {"port": 8080, "access": "private", "url": "https://8080-sb-1.preview.test", "created_at": WHEN}
    server.on("POST", f"{BASE}/v1/sandboxes/sb-1/preview-ports", httpx.Response(201, json=published))
    server.on("GET", f"{BASE}/v1/sandboxes/sb-1/preview-ports/8080/token", httpx.Response(200, json={"token": "pt"}))
    assert box.publish_preview_port(8080, access="private").access == "private"
    assert body(server.seen[-1]) == {"port": 8080, "access": "private"}
    assert box.get_preview_token(8080) == "pt"
    asked = len(server.seen)
    for port in (3128, 80, "8080", True):
        with pytest.raises(ValidationError) as err:
            box.publish_preview_port(port)
        assert err.value.code == SdkCode.INVALID_PORT
    assert len(server.seen) == asked


# --- errors and retries ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("answer", "cls", "code"), [
    (error(401, ServerCode.INVALID_API_KEY), AuthenticationError, ServerCode.INVALID_API_KEY),
    (error(400, ServerCode.INVALID_REQUEST), ValidationError, ServerCode.INVALID_REQUEST),
    (error(404, ServerCode.NOT_FOUND), NotFoundError, ServerCode.NOT_FOUND),
    (error(409, ServerCode.SANDBOX_FAILED), ConflictError, ServerCode.SANDBOX_FAILED),
    (error(429, ServerCode.TOO_MANY_SANDBOXES), RateLimitError, ServerCode.TOO_MANY_SANDBOXES),
    (error(503, ServerCode.BOOT_FAILED), ServerError, ServerCode.BOOT_FAILED),
    (error(504, ServerCode.READY_TIMEOUT), SandboxTimeoutError, ServerCode.READY_TIMEOUT),
    (httpx.Response(502, text="<html>bad gateway</html>"), ServerError, "http_502"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_an_error_answer_raises_the_class_of_its_status_with_its_code(sdk: Any, server: Script, answer: httpx.Response,
                                                                      cls: type[SandboxError], code: str) -> None:
    server.on("POST", f"{BASE}/v1/sandboxes/sb-1/connect", answer)
    with pytest.raises(cls) as err:
        sdk.connect("sb-1")
    assert err.value.code == code and err.value.status_code == answer.status_code


def test_a_get_is_retried_through_transient_failures(sdk: Any, server: Script) -> None:
    server.on("GET", f"{BASE}/v1/sandboxes", error(503, "unavailable"), error(502, "bad_gateway"),
              httpx.Response(200, json=[]))
    assert sdk.list() == [] and len(server.seen) == 3


def test_a_get_gives_up_after_its_retries(sdk: Any, server: Script) -> None:
    server.on("GET", f"{BASE}/v1/sandboxes", error(503, "unavailable"))
    with pytest.raises(ServerError) as err:
        sdk.list()
    assert (err.value.status_code, err.value.code, len(server.seen)) == (503, "unavailable", 1 + flow.RETRIES)


def test_a_get_is_retried_when_the_connection_breaks(sdk: Any, server: Script) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    server.on("GET", f"{BASE}/v1/sandboxes", broken, httpx.Response(200, json=[]))
    assert sdk.list() == [] and len(server.seen) == 2


def test_a_post_create_is_never_retried(sdk: Any, server: Script) -> None:
    server.on("POST", f"{BASE}/v1/sandboxes", error(503, "unavailable"), httpx.Response(201, json=SANDBOX))
    with pytest.raises(ServerError):
        sdk.create("box")
    assert len(server.seen) == 1


def test_a_delete_is_retried_and_a_404_after_it_is_quiet(sdk: Any, server: Script) -> None:
    server.on("DELETE", f"{BASE}/v1/sandboxes/sb-1", error(503, "unavailable"), error(404, ServerCode.NOT_FOUND))
    sdk.kill_by_id("sb-1")
    assert [r.method for r in server.seen] == ["DELETE", "DELETE"]


def test_a_rotated_data_plane_token_is_fetched_once_again(box: Any, server: Script) -> None:
    server.on("GET", f"{DATA}/files", error(401, ServerCode.INVALID_ACCESS_TOKEN), httpx.Response(200, content=b"x"))
    server.on("POST", f"{BASE}/v1/sandboxes/sb-1/connect", httpx.Response(200, json={**SANDBOX, "access_token": "t2"}))
    assert box.files.read("/a") == b"x"
    assert [r.headers["X-Access-Token"] for r in server.sent("GET", f"{DATA}/files")] == ["token-1", "t2"]


# --- commands -------------------------------------------------------------------------------------------

def test_run_streams_its_output_to_the_callbacks_as_it_comes(box: Any, server: Script) -> None:
    server.on("POST", f"{DATA}/commands/run", events(
        ("stdout", {"data": "one\n"}), ("stderr", {"data": "warn\n"}), ("stdout", {"data": "two\n"}),
        ("exit", {"exit_code": 0, "timed_out": False})))
    seen: list[tuple[str, str]] = []
    result = box.commands.run("make", cwd="/src", env={"A": "1"}, on_stdout=lambda d: seen.append(("out", d)),
                              on_stderr=lambda d: seen.append(("err", d)))
    assert seen == [("out", "one\n"), ("err", "warn\n"), ("out", "two\n")]
    assert (result.stdout, result.stderr, result.exit_code) == ("one\ntwo\n", "warn\n", 0)
    (request,) = server.sent("POST", f"{DATA}/commands/run")
    assert body(request) == {"command": "make", "cwd": "/src", "env": {"A": "1"}}
    assert request.headers["Accept"] == "text/event-stream" and request.headers["X-Access-Token"] == "token-1"


def test_a_non_zero_exit_is_a_result(box: Any, server: Script) -> None:
    server.on("POST", f"{DATA}/commands/run", events(("stderr", {"data": "no\n"}),
                                                     ("exit", {"exit_code": 7, "timed_out": False})))
    result = box.commands.run("exit 7")
    assert (result.stderr, result.exit_code) == ("no\n", 7)


def test_a_command_out_of_time_raises_with_what_it_printed(box: Any, server: Script) -> None:
    server.on("POST", f"{DATA}/commands/run", events(("stdout", {"data": "so far"}),
                                                     ("exit", {"exit_code": 137, "timed_out": True})))
    with pytest.raises(SandboxTimeoutError) as err:
        box.commands.run("sleep 100", timeout_seconds=1)
    assert err.value.code == SdkCode.COMMAND_TIMEOUT and err.value.stdout == "so far"


def test_a_stream_that_ends_before_the_exit_is_an_error(box: Any, server: Script) -> None:
    server.on("POST", f"{DATA}/commands/run", events(("stdout", {"data": "half"})))
    with pytest.raises(ServerError) as err:
        box.commands.run("true")
    assert err.value.code == SdkCode.STREAM_ENDED


def test_a_failed_sandbox_on_the_stream_is_a_conflict(box: Any, server: Script) -> None:
    server.on("POST", f"{DATA}/commands/run", events(("error", {"code": ServerCode.SANDBOX_FAILED, "message": "x"})))
    with pytest.raises(ConflictError) as err:
        box.commands.run("true")
    assert err.value.code == ServerCode.SANDBOX_FAILED


def test_async_output_callbacks_may_be_coroutines(server: Script) -> None:
    server.on("POST", f"{BASE}/v1/sandboxes", httpx.Response(201, json=SANDBOX))
    server.on("POST", f"{DATA}/commands/run", events(("stdout", {"data": "hi"}),
                                                     ("exit", {"exit_code": 0, "timed_out": False})))

    async def main() -> list[str]:
        got: list[str] = []

        async def collect(data: str) -> None:
            await asyncio.sleep(0)
            got.append(data)

        sb = await AsyncSandbox.create("box")
        await sb.commands.run("echo hi", on_stdout=collect)
        await sb.close()
        return got

    assert asyncio.run(main()) == ["hi"]


def test_a_bad_pty_is_refused_before_any_request(box: Any, server: Script) -> None:
    asked = len(server.seen)
    with pytest.raises(ValidationError):
        box.commands.spawn("sh", pty=(0, 80))
    assert len(server.seen) == asked


def test_a_process_that_cannot_be_attached_is_killed(sdk: Any, server: Script) -> None:
    data = "http://127.0.0.1:9/data/sb-1"  # the process' WebSocket finds nobody there
    server.on("POST", f"{BASE}/v1/sandboxes", httpx.Response(201, json={**SANDBOX, "data_plane_url": data}))
    server.on("POST", f"{data}/commands/spawn", httpx.Response(200, json={"pid": 42}))
    server.on("POST", f"{data}/commands/42/signal", httpx.Response(200, json={"signalled": True}))
    with pytest.raises(ServerError) as err:
        sdk.create("box").commands.spawn("sleep 100", pty=(24, 80))
    assert err.value.code == SdkCode.CONNECTION_ERROR
    assert body(server.sent("POST", f"{data}/commands/spawn")[0]) == {"command": "sleep 100",
                                                                      "pty": {"rows": 24, "cols": 80}}
    assert body(server.sent("POST", f"{data}/commands/42/signal")[0]) == {"signal": 9}


# --- files ----------------------------------------------------------------------------------------------

def test_files_are_written_and_read_as_bytes(box: Any, server: Script) -> None:
    server.on("PUT", f"{DATA}/files", httpx.Response(204))
    server.on("GET", f"{DATA}/files", httpx.Response(200, content="héllo".encode()))
    box.files.write("/home/user/a.txt", "héllo", user="root")
    (put,) = server.sent("PUT", f"{DATA}/files")
    assert put.content == "héllo".encode() and dict(put.url.params) == {"path": "/home/user/a.txt", "user": "root"}
    assert box.files.read("/home/user/a.txt") == "héllo".encode()
    assert box.files.read_text("/home/user/a.txt") == "héllo"


def test_a_large_file_goes_whole_with_its_length(box: Any, server: Script) -> None:
    data = bytes(range(256)) * (3 * flow.SEND_PIECE // 256) + b"tail!"  # past the sync front's pieces
    server.on("PUT", f"{DATA}/files", httpx.Response(204))
    box.files.write("/home/user/big", data)
    (put,) = server.sent("PUT", f"{DATA}/files")
    assert put.headers["content-length"] == str(len(data)) and "transfer-encoding" not in put.headers
    assert put.content == data


def test_file_content_that_is_not_text_or_bytes_is_refused_before_any_request(box: Any, server: Script) -> None:
    asked = len(server.seen)
    with pytest.raises(ValidationError) as err:
        box.files.write("/a", 42)
    assert err.value.code == SdkCode.INVALID_ARGUMENT and len(server.seen) == asked


def test_a_missing_file_is_not_found_and_exists_says_so(box: Any, server: Script) -> None:
    server.on("GET", f"{DATA}/files/stat", error(404, ServerCode.FILE_NOT_FOUND))
    assert box.files.exists("/nope") is False
    with pytest.raises(NotFoundError) as err:
        box.files.get_info("/nope")
    assert err.value.code == ServerCode.FILE_NOT_FOUND


def test_a_watch_hands_out_the_directorys_changes_until_it_ends(sdk: Any, box: Any, server: Script) -> None:
    changes = "".join(f"data: {json.dumps({'name': n, 'type': t})}\n\n" for n, t in (("a", "create"), ("a", "write")))
    server.on("GET", f"{DATA}/files/watch", httpx.Response(200, content=(": hi\n\n" + changes).encode()))
    handle = box.files.watch_dir("/home/user", recursive=True)
    assert [(e.name, e.type) for e in drain(sdk, handle)] == [("a", "create"), ("a", "write")]
    assert dict(server.sent("GET", f"{DATA}/files/watch")[0].url.params) == {"path": "/home/user", "recursive": "true"}


def test_a_watch_that_cannot_start_raises_at_once(box: Any, server: Script) -> None:
    server.on("GET", f"{DATA}/files/watch", error(404, ServerCode.FILE_NOT_FOUND))
    with pytest.raises(NotFoundError):
        box.files.watch_dir("/nope")


# --- templates and secrets --------------------------------------------------------------------------------

def _log(*lines: dict[str, Any]) -> httpx.Response:
    return httpx.Response(200, content="".join(json.dumps(line) + "\n" for line in lines).encode())


def test_waiting_for_a_build_passes_its_log_on_and_raises_its_failure(fronts: tuple[Any, Any], server: Script) -> None:
    _, template = fronts
    failed = {**BUILD, "status": "failed", "error": {"code": "step_failed", "message": "exit 1", "step": 0,
                                                      "exit_code": 1}}
    server.on("POST", f"{BASE}/v1/templates", httpx.Response(201, json=TEMPLATE))
    server.on("GET", f"{BASE}/v1/templates/t-1/builds/b-1/logs", _log(
        {"seq": 1, "time": WHEN, "step": 0, "stream": "stdout", "text": "building"},
        {"done": True, "status": "failed", "error": failed["error"]}))
    server.on("GET", f"{BASE}/v1/templates/t-1/builds/b-1", httpx.Response(200, json=failed))
    server.on("GET", f"{BASE}/v1/templates/t-1", httpx.Response(200, json={**TEMPLATE, "status": "failed",
                                                                         "latest_build": failed}))
    made = template.create("py", steps=[RunStep("false")], vcpu=1)
    assert body(server.seen[0]) == {"name": "py", "from": "hutch/base", "steps": [{"run": "false"}], "vcpu": 1}
    lines: list[str] = []
    with pytest.raises(BuildError) as err:
        made.wait_until_ready(on_log=lambda line: lines.append(line.text))
    assert lines == ["building"] and made.status == "failed"
    assert (err.value.code, err.value.step, err.value.exit_code, err.value.build_id) == ("step_failed", 0, 1, "b-1")


def test_a_templates_spec_is_checked_before_the_api_key(fronts: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _, template = fronts
    monkeypatch.delenv("HUTCH_API_KEY", raising=False)
    with pytest.raises(ValidationError) as err:
        template.create("py", vcpu=99)
    assert err.value.code == ServerCode.INVALID_SPEC


def test_a_secret_is_created_with_its_auth(server: Script) -> None:
    info = {"name": "k", "provider": None, "allowed_hosts": ["api.test"], "auth": {"header": "X-Key"}, "version": 1,
            "created_at": WHEN, "updated_at": WHEN}
    server.on("POST", f"{BASE}/v1/secrets", httpx.Response(201, json=info))
    secret = Secret.create("k", "v", allowed_hosts=["api.test"], auth=SecretAuth("X-Key"))
    assert body(server.seen[0]) == {"name": "k", "value": "v", "allowed_hosts": ["api.test"],
                                    "auth": {"header": "X-Key", "format": "{value}"}}
    assert (secret.name, secret.auth, secret.version) == ("k", SecretAuth("X-Key"), 1)


# --- configuration ----------------------------------------------------------------------------------------

def test_configuration_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUTCH_API_KEY", "from-env")
    monkeypatch.setenv("HUTCH_BASE_URL", "http://elsewhere:1/")
    monkeypatch.setenv("HUTCH_ACTOR", "ci")
    cfg = ConnectionConfig.resolve()
    assert (cfg.api_key, cfg.base_url, cfg.actor) == ("from-env", "http://elsewhere:1", "ci")
    assert ConnectionConfig.resolve("arg", "http://x").api_key == "arg"
    monkeypatch.delenv("HUTCH_API_KEY")
    with pytest.raises(AuthenticationError) as err:
        ConnectionConfig.resolve()
    assert err.value.code == SdkCode.MISSING_API_KEY


def test_an_unreachable_server_is_a_typed_error() -> None:
    with pytest.raises(ServerError) as err:
        Sandbox.create(name="x", api_key="k", base_url="http://127.0.0.1:9")
    assert err.value.code == SdkCode.CONNECTION_ERROR


def _event(i: int, kind: str) -> dict[str, Any]:
    return {"id": i, "type": kind, "at": WHEN, "sandbox_id": "sb-1", "data": {}}


def _stream(opened: str, *items: dict[str, Any]) -> httpx.Response:
    """The events' stream as the server sends it: its preamble (the cursor it opened at), then events."""
    text = f": events past {opened}\n\n" + "".join(
        f"id: {e['id']}\nevent: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in items)
    return httpx.Response(200, content=text.encode(), headers={"Content-Type": "text/event-stream"})


def test_an_event_stream_goes_on_after_its_last_event_across_a_break_and_a_restart(server: Script) -> None:
    url = f"{BASE}/v1/events/stream"
    server.on("GET", url, _stream("5", _event(6, "sandbox.created")), error(503, "store_unavailable"),
              httpx.Response(502, text="bad gateway"), _stream("x", _event(7, "sandbox.killed")))
    stream = Events.stream()  # from now on: the first preamble says where now is
    try:
        got = list(itertools.islice(stream, 2))
    finally:
        stream.close()
    assert [(e.id, e.type) for e in got] == [(6, "sandbox.created"), (7, "sandbox.killed")]
    assert [r.url.params.get("after") for r in server.sent("GET", url)] == [None, "6", "6", "6"]


def test_an_event_stream_from_a_cursor_ignores_a_preamble_that_is_no_number_and_stops_on_a_refusal(
        server: Script) -> None:
    url = f"{BASE}/v1/events/stream"
    server.on("GET", url, _stream("1e3", _event(3, "sandbox.paused")), error(401, "invalid_api_key"))
    stream = Events.stream(after=2)
    assert next(stream).id == 3
    with pytest.raises(AuthenticationError):
        next(stream)
    assert [r.url.params.get("after") for r in server.sent("GET", url)] == ["2", "3"]


def test_threads_making_their_first_clients_at_once_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the CA bundle costs ~20 ms: fifty threads each making their first sandbox at once
    (a burst from a fresh process) load it once, not fifty times."""
    monkeypatch.setattr(config, "_tls", [])
    made: list[ssl.SSLContext] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ssl, "create_default_context", counted)
    start = threading.Barrier(20)
    got: list[ssl.SSLContext] = []

    def first_client() -> None:
        start.wait()
        got.append(config.tls_context())

    threads = [threading.Thread(target=first_client) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and all(c is made[0] for c in got) and len(got) == 20
