"""The HTTP API as any client sees it: auth on both planes, typed errors, nothing half-made."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from hutch import Sandbox
from tests.integration.support import Env


@pytest.fixture
def api(env: Env) -> Iterator[httpx.Client]:
    with env.api() as c:
        yield c


@pytest.fixture
def made(api: httpx.Client) -> Iterator[dict[str, Any]]:
    r = api.post("/v1/sandboxes", json={"name": "raw"})
    assert r.status_code == 201
    body = r.json()
    yield body
    api.delete(f"/v1/sandboxes/{body['id']}")


def _code(r: httpx.Response) -> str:
    return str(r.json()["error"]["code"])


def test_unknown_sandbox_is_404_not_found(api: httpx.Client) -> None:
    for method, path in [("GET", "/v1/sandboxes/nope"), ("DELETE", "/v1/sandboxes/00000000-0000-0000-0000-000000000000"),
                         ("PATCH", "/v1/sandboxes/nope"), ("POST", "/v1/sandboxes/nope/connect")]:
        r = api.request(method, path, json={} if method == "PATCH" else None)
        assert r.status_code == 404 and _code(r) == "not_found", (method, path, r.text)


def test_bad_json_and_bad_fields_are_400_and_make_nothing(api: httpx.Client) -> None:
    before = len(api.get("/v1/sandboxes").json())
    r = api.post("/v1/sandboxes", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and _code(r) == "invalid_json"
    r = api.post("/v1/sandboxes", content=b"\xff\xfe\x00", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    bad_bodies: tuple[object, ...] = ({"name": "n" * 129}, {"name": "ok", "metadata": {"k": "v" * 2000}},
                                      {"name": "ok", "surprise": 1}, {"name": "ok", "metadata": {"k": 5}},
                                      {"name": "ok", "env_vars": {"A": "x\x00y"}}, {}, [])
    for body in bad_bodies:
        r = api.post("/v1/sandboxes", json=body)
        assert r.status_code == 400 and _code(r) == "invalid_request", (body, r.text)
        assert r.json()["error"]["message"]
    r = api.post("/v1/sandboxes", content=b"{" + b" " * (2 * 2**20) + b"}", headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and _code(r) == "payload_too_large"
    assert len(api.get("/v1/sandboxes").json()) == before


def test_control_plane_needs_an_api_key(env: Env) -> None:
    r = httpx.get(f"{env.url}/v1/sandboxes")
    assert r.status_code == 401 and _code(r) == "unauthorized"
    r = httpx.get(f"{env.url}/v1/sandboxes", headers={"Authorization": "Bearer hutch_wrong"})
    assert r.status_code == 401 and _code(r) == "invalid_api_key"
    r = httpx.get(f"{env.url}/v1/sandboxes", headers={"X-API-Key": env.key_a})
    assert r.status_code == 200


def test_data_plane_takes_only_the_boxes_own_token(env: Env, api: httpx.Client, made: dict[str, Any]) -> None:
    url, token = made["data_plane_url"], made["access_token"]
    run = {"command": "echo hi"}
    assert httpx.post(f"{url}/commands/run", json=run, headers={"X-Access-Token": token}).json()["stdout"] == "hi\n"
    r = httpx.post(f"{url}/commands/run", json=run)
    assert r.status_code == 401 and _code(r) == "unauthorized"
    r = httpx.post(f"{url}/commands/run", json=run, headers={"Authorization": f"Bearer {env.key_a}"})
    assert r.status_code == 401, "the data plane must never accept the API key"
    r = httpx.post(f"{url}/commands/run", json=run, headers={"X-Access-Token": env.key_a})
    assert r.status_code == 401 and _code(r) == "invalid_access_token"
    other = api.post("/v1/sandboxes", json={"name": "other"}).json()
    try:
        r = httpx.post(f"{other['data_plane_url']}/commands/run", json=run, headers={"X-Access-Token": token})
        assert r.status_code == 401, "one box's token must not open another box"
        r = httpx.get(f"{other['data_plane_url']}/files", params={"path": "/etc/hostname"},
                      headers={"X-Access-Token": token})
        assert r.status_code == 401
    finally:
        api.delete(f"/v1/sandboxes/{other['id']}")


def test_connect_returns_the_same_working_token(api: httpx.Client, made: dict[str, Any]) -> None:
    again = api.post(f"/v1/sandboxes/{made['id']}/connect").json()
    assert again["access_token"] == made["access_token"] and again["data_plane_url"] == made["data_plane_url"]


def test_command_results_over_json_and_over_server_sent_events(made: dict[str, Any]) -> None:
    url, headers = made["data_plane_url"], {"X-Access-Token": made["access_token"]}
    r = httpx.post(f"{url}/commands/run", json={"command": "echo a; echo b >&2; exit 3"}, headers=headers)
    assert r.json() == {"stdout": "a\n", "stderr": "b\n", "exit_code": 3, "timed_out": False}
    with httpx.stream("POST", f"{url}/commands/run", json={"command": "echo a; exit 4"},
                      headers={**headers, "Accept": "text/event-stream"}) as s:
        assert s.headers["content-type"].startswith("text/event-stream")
        events = [line for line in s.iter_lines() if line.startswith(("event:", "data:"))]
    assert events[0] == "event: start" and "event: stdout" in events
    assert events[-2:] == ["event: exit", 'data: {"exit_code": 4, "timed_out": false}']


def test_upload_limit_and_bad_queries(made: dict[str, Any]) -> None:
    url, headers = made["data_plane_url"], {"X-Access-Token": made["access_token"]}
    r = httpx.get(f"{url}/files", headers=headers)
    assert r.status_code == 400 and _code(r) == "invalid_request"
    r = httpx.put(f"{url}/files", params={"path": "/tmp/x", "user": "admin"}, content=b"x", headers=headers)
    assert r.status_code == 400
    r = httpx.post(f"{url}/commands/run", json={"command": "true", "user": "admin"}, headers=headers)
    assert r.status_code == 400 and _code(r) == "invalid_request"


def test_openapi_document_is_published(env: Env) -> None:
    doc = httpx.get(f"{env.url}/openapi.json").json()
    assert "/v1/sandboxes" in doc["paths"] and "/data/v1/sandboxes/{sandbox_id}/commands/run" in doc["paths"]


def test_every_error_has_a_code_and_a_message(api: httpx.Client) -> None:
    for r in (api.get("/v1/nowhere"), api.put("/v1/sandboxes"), api.get("/v1/sandboxes", params={"status": "bogus"})):
        body = r.json()
        assert 400 <= r.status_code < 500 and body["error"]["code"] and body["error"]["message"], r.text
    assert json.loads(api.get("/v1/nowhere").text)["error"]["code"] == "not_found"


def test_sdk_sees_the_same_box_the_raw_api_made(made: dict[str, Any]) -> None:
    sb = Sandbox.connect(made["id"])
    assert sb.commands.run("hostname").exit_code == 0
    sb.close()


def test_json_mode_output_is_capped_and_streaming_is_not(made: dict[str, Any]) -> None:
    url, headers = made["data_plane_url"], {"X-Access-Token": made["access_token"]}
    flood = {"command": "head -c 70000000 /dev/zero | tr '\\0' x"}
    r = httpx.post(f"{url}/commands/run", json=flood, headers=headers, timeout=120)
    assert r.status_code == 413 and _code(r) == "output_too_large"
    sb = Sandbox.connect(made["id"])
    try:
        assert len(sb.commands.run(flood["command"]).stdout) == 70_000_000
    finally:
        sb.close()


def test_a_chunked_json_body_over_the_limit_is_413(api: httpx.Client) -> None:
    def body() -> Any:
        yield b'{"name": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'

    r = api.post("/v1/sandboxes", content=body(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and _code(r) == "payload_too_large"


def test_metrics_count_creates_commands_errors_and_boxes(env: Env, made: dict[str, Any]) -> None:
    httpx.post(f"{made['data_plane_url']}/commands/run", json={"command": "true"},
               headers={"X-Access-Token": made["access_token"]})
    httpx.get(f"{env.url}/v1/sandboxes/nope", headers={"Authorization": f"Bearer {env.key_a}"})
    text = httpx.get(f"{env.url}/metrics").text
    samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line and line[0] != "#"}
    assert sum(v for k, v in samples.items() if k.startswith("hutch_sandbox_create_seconds_count")) >= 1
    assert samples["hutch_command_seconds_count"] >= 1
    assert samples['hutch_api_errors_total{code="not_found",status="404"}'] >= 1
    assert samples['hutch_sandboxes{status="active"}'] >= 1
    assert "hutch_warm_pool_boxes" in samples


def _attach(url: str, pid: Any, token: str | None) -> Any:
    headers = {"X-Access-Token": token} if token else {}
    return ws_connect(url.replace("http", "ws", 1) + f"/commands/{pid}/ws", additional_headers=headers, open_timeout=30)


def test_process_attach_takes_only_the_boxes_own_token(api: httpx.Client, made: dict[str, Any]) -> None:
    url, token = made["data_plane_url"], made["access_token"]
    r = httpx.post(f"{url}/commands/spawn", json={"command": "cat"}, headers={"X-Access-Token": token})
    assert r.status_code == 200
    pid = r.json()["pid"]
    other = api.post("/v1/sandboxes", json={"name": "other"}).json()
    try:
        for target, tok, status, code in [(url, None, 401, "unauthorized"), (url, other["access_token"], 401,
                                           "invalid_access_token"), (url, token, 404, "process_not_found")]:
            with pytest.raises(InvalidStatus) as refused:
                _attach(target, pid if code != "process_not_found" else "abc", tok).close()
            assert refused.value.response.status_code == status
            assert json.loads(bytes(refused.value.response.body or b""))["error"]["code"] == code
        r = httpx.post(f"{other['data_plane_url']}/commands/{pid}/signal", json={"signal": 9},
                       headers={"X-Access-Token": other["access_token"]})
        assert r.status_code == 404, "a pid names a process of the token's own box only"
    finally:
        api.delete(f"/v1/sandboxes/{other['id']}")
    with _attach(url, pid, token) as ws:
        ws.send(b"raw bytes\n")
        ws.send(json.dumps({"t": "bogus", "id": 1}))
        frames = [json.loads(ws.recv(timeout=30)), json.loads(ws.recv(timeout=30))]  # in either order
        assert {"t": "stdout", "d": "raw bytes\n"} in frames
        err = next(f for f in frames if f["t"] == "error")
        assert err["code"] == "invalid_message" and err["id"] == 1 and err["status"] == 400
        ws.send(json.dumps({"t": "resize", "rows": 0, "cols": 5, "id": 2}))
        assert json.loads(ws.recv(timeout=30))["code"] == "invalid_message"
        ws.send("not json")
        assert json.loads(ws.recv(timeout=30))["code"] == "invalid_message"
        ws.send(json.dumps({"t": "close_stdin"}))
        assert json.loads(ws.recv(timeout=30)) == {"t": "exit", "exit_code": 0}


def test_spawn_rejects_bad_bodies_and_starts_nothing(made: dict[str, Any]) -> None:
    url, headers = made["data_plane_url"], {"X-Access-Token": made["access_token"]}
    for body in ({"command": ""}, {"command": "true", "pty": {"rows": 0, "cols": 80}}, {"command": "true", "x": 1},
                 {"command": "a\x00b"}, {"command": "true", "user": "admin"}):
        r = httpx.post(f"{url}/commands/spawn", json=body, headers=headers)
        assert r.status_code == 400 and _code(r) == "invalid_request", (body, r.text)
    r = httpx.post(f"{url}/commands/0/signal", json={"signal": 9}, headers=headers)
    assert r.status_code == 400
    r = httpx.post(f"{url}/commands/5/signal", json={"signal": 99}, headers=headers)
    assert r.status_code == 400
    assert httpx.get(f"{url}/commands", headers=headers).json() == []
