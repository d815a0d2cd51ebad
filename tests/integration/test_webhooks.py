"""Webhooks: a team's events POSTed to its endpoints in order, signed, retried, recorded; an
endpoint that keeps failing is disabled (an event itself) and a slow one delays no other; private
destinations are refused unless the operator allows them."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import subprocess
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from hutch import Sandbox, Webhooks, verify_webhook
from hutch.sdk.errors import SandboxError
from tests.integration.support import HUTCH, Env, Server, make_server, retire, wait_for


@dataclass
class Receiver:
    """An endpoint on loopback: records what it is sent, and fails the first `fail` requests
    (500), or holds every request until `release` is set."""

    fail: int = 0
    hold: bool = False
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(body) for headers, body in self.got]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    yield from _serve(Receiver())


def _serve(r: Receiver) -> Generator[Receiver, None, None]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if r.hold:
                r.release.wait(30)
            status = 500 if len(r.answered) < r.fail else 204
            r.answered.append(status)
            if status == 204:
                r.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    r.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield r
    finally:
        r.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def allowing() -> Iterator[Server]:
    """A server whose operator allows webhooks to loopback, and retries an event for 6 s."""
    server = make_server("--warm-pool", "0", "--webhook-allow", "127.0.0.1", "--webhook-retry-for", "6")
    server.start()
    try:
        yield server
    finally:
        retire(server)


def test_a_boxs_life_is_delivered_in_order_and_signed(allowing: Server, receiver: Receiver) -> None:
    args = allowing.client_args()
    hook = Webhooks.create(receiver.url, name="all", **args)
    assert hook.secret is not None and hook.enabled and hook.types == []
    assert Webhooks.get(hook.id, **args).secret is None, "the secret is shown once"
    try:
        sb = Sandbox.create(name="told", **args)
        sb.pause()
        sb.resume()
        sb.kill()
        wanted = ["sandbox.created", "sandbox.paused", "sandbox.resumed", "sandbox.killed"]
        wait_for(lambda: [e["type"] for e in receiver.events() if e["sandbox_id"] == sb.id] == wanted, 60,
                 "the box's events at the receiver")
        ids = [e["id"] for e in receiver.events()]
        assert ids == sorted(ids) and len(set(ids)) == len(ids), "in order, none twice"
        for headers, body in receiver.got:
            event = verify_webhook(body, headers["hutch-signature"], hook.secret)
            assert headers["hutch-event-id"] == str(event["id"]) and headers["hutch-webhook-id"] == hook.id
            assert headers["hutch-event-type"] == event["type"]
        headers, body = receiver.got[0]
        with pytest.raises(SandboxError) as refused:
            verify_webhook(body + b" ", headers["hutch-signature"], hook.secret)
        assert refused.value.code == "bad_webhook_signature"
        with pytest.raises(SandboxError):
            verify_webhook(body, headers["hutch-signature"], "whsec_not-the-secret")
        deliveries = Webhooks.deliveries(hook.id, **args)
        assert {d.event_id for d in deliveries} == set(ids) and all(d.ok and d.status == 204 for d in deliveries)
    finally:
        Webhooks.delete(hook.id, **args)


def test_a_failing_endpoint_is_retried_and_each_attempt_recorded(allowing: Server, receiver: Receiver) -> None:
    args = allowing.client_args()
    receiver.fail = 2
    hook = Webhooks.create(receiver.url, types=["sandbox.created"], **args)
    try:
        sb = Sandbox.create(name="retried", **args)
        sb.kill()
        wait_for(lambda: len(receiver.got) == 1, 60, "the delivery after two failures")
        assert receiver.answered == [500, 500, 204]
        assert receiver.events()[0]["type"] == "sandbox.created" and receiver.events()[0]["sandbox_id"] == sb.id
        attempts = sorted(Webhooks.deliveries(hook.id, **args), key=lambda d: d.id)
        assert [(d.attempt, d.status, d.ok) for d in attempts] == [(1, 500, False), (2, 500, False), (3, 204, True)]
        assert attempts[0].error == "answered 500" and attempts[0].event_id == attempts[2].event_id
        delivery_ids = {h["hutch-delivery-id"] for h, _ in receiver.got}
        assert len(delivery_ids) == 1
    finally:
        Webhooks.delete(hook.id, **args)


def test_an_endpoint_that_keeps_failing_is_disabled_and_a_slow_one_delays_no_other(allowing: Server) -> None:
    args = allowing.client_args()
    dead, slow, healthy = Receiver(fail=10**6), Receiver(hold=True), Receiver()
    serving = [_serve(r) for r in (dead, slow, healthy)]
    for s in serving:
        next(s)
    hooks = {name: Webhooks.create(r.url, name=name, **args) for name, r in
             (("dead", dead), ("slow", slow), ("healthy", healthy))}
    try:
        sb = Sandbox.create(name="many-ends", **args)
        sb.kill()
        # the healthy endpoint has both events while the slow one still holds its first
        wait_for(lambda: [e["type"] for e in healthy.events()] == ["sandbox.created", "sandbox.killed"], 60,
                 "the healthy endpoint's deliveries")
        assert slow.got == [] and slow.answered == []
        # the dead one is retried for 6 s, then disabled: an event the others are sent
        wait_for(lambda: not Webhooks.get(hooks["dead"].id, **args).enabled, 60, "the dead endpoint disabled")
        disabled = Webhooks.get(hooks["dead"].id, **args)
        assert disabled.disabled_reason is not None and "sandbox.created" in disabled.disabled_reason
        wait_for(lambda: any(e["type"] == "webhook.disabled" for e in healthy.events()), 60, "the disabled event")
        told = next(e for e in healthy.events() if e["type"] == "webhook.disabled")
        assert told["data"]["webhook_id"] == hooks["dead"].id
        failed = Webhooks.deliveries(hooks["dead"].id, **args)
        assert len(failed) >= 2 and not any(d.ok for d in failed)
        assert {d.event_type for d in failed} == {"sandbox.created"}, "none past the event it could not deliver"
        # enabled again, it goes on from the event it was not delivered
        dead.fail = 0
        Webhooks.update(hooks["dead"].id, enabled=True, **args)
        wait_for(lambda: [e["type"] for e in dead.events()][:2] == ["sandbox.created", "sandbox.killed"], 60,
                 "the re-enabled endpoint's deliveries")
        assert Webhooks.get(hooks["dead"].id, **args).disabled_reason is None
        slow.release.set()
        wait_for(lambda: len(slow.got) >= 2, 60, "the slow endpoint's deliveries once it answers")
    finally:
        for hook in hooks.values():
            Webhooks.delete(hook.id, **args)
        for s in serving:
            s.close()


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook", "http://10.0.0.7/hook", "http://169.254.169.254/latest",
                                 "http://[::1]:8080/", "http://localhost:8080/", "http://metadata.google.internal/",
                                 "http://192.168.1.1/", "https://user:pw@example.com/", "ftp://example.com/",
                                 "http:///nohost", "http://[fd00:ec2::254]/"])
def test_private_and_malformed_destinations_are_refused_without_the_operators_flag(env: Env, url: str) -> None:
    with env.api() as api:
        before = api.get("/v1/webhooks").json()
        r = api.post("/v1/webhooks", json={"url": url})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "webhook_url_refused"
        assert api.get("/v1/webhooks").json() == before, "nothing was made"


def test_bad_input_is_a_typed_error_and_teams_see_only_their_own(env: Env, receiver: Receiver) -> None:
    with env.api() as api, env.api(env.key_b) as other:
        assert api.post("/v1/webhooks", json={"url": "https://example.com/x", "types": ["sandbox.exploded"]}
                        ).json()["error"]["code"] == "invalid_request"
        assert api.post("/v1/webhooks", json={"url": "https://example.com/x", "secret": "short"}).status_code == 400
        assert api.post("/v1/webhooks", json={"url": 42}).status_code == 400
        assert api.get("/v1/webhooks/nope").json()["error"]["code"] == "webhook_not_found"
        # a public address (disabled: a test sends nothing off this machine)
        made = api.post("/v1/webhooks", json={"url": "https://93.184.215.14/hook", "types": ["sandbox.killed"],
                                              "enabled": False})
        assert made.status_code == 201, made.text
        hook = made.json()
        try:
            assert hook["secret"].startswith("whsec_")
            assert other.get(f"/v1/webhooks/{hook['id']}").status_code == 404
            assert other.delete(f"/v1/webhooks/{hook['id']}").status_code == 404
            assert other.get(f"/v1/webhooks/{hook['id']}/deliveries").status_code == 404
            assert hook["id"] not in {w["id"] for w in other.get("/v1/webhooks").json()}
            changed = api.patch(f"/v1/webhooks/{hook['id']}", json={"url": "http://10.1.2.3/"})
            assert changed.json()["error"]["code"] == "webhook_url_refused"
            assert api.get(f"/v1/webhooks/{hook['id']}").json()["url"] == "https://93.184.215.14/hook"
        finally:
            assert api.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
        assert api.get(f"/v1/webhooks/{hook['id']}").status_code == 404


def test_a_team_has_at_most_its_cap(env: Env) -> None:
    with env.api(env.key_b) as api:
        made = []
        try:
            while True:
                r = api.post("/v1/webhooks", json={"url": "https://93.184.215.14/hook", "enabled": False})
                if r.status_code != 201:
                    break
                made.append(r.json()["id"])
                assert len(made) <= 20
            assert r.status_code == 429 and r.json()["error"]["code"] == "too_many_webhooks"
            assert len(made) == 20
        finally:
            for webhook_id in made:
                api.delete(f"/v1/webhooks/{webhook_id}")


def test_e2bs_webhooks_are_registered_in_its_shapes_and_signed_as_e2b_signs(allowing: Server,
                                                                             receiver: Receiver) -> None:
    api = httpx.Client(base_url=f"{allowing.url}/e2b", headers={"X-API-KEY": allowing.e2b_key()}, timeout=60)
    made = api.post("/events/webhooks", json={
        "name": "lifecycle", "url": receiver.url, "enabled": True, "signatureSecret": "e2b-secret",
        "events": ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"]})
    assert made.status_code == 201, made.text
    hook = made.json()
    assert hook["events"] == ["sandbox.lifecycle.created", "sandbox.lifecycle.killed"] and hook["enabled"]
    assert set(hook) >= {"id", "teamID", "name", "url", "createdAt"} and "signatureSecret" not in hook
    try:
        assert [w["id"] for w in api.get("/events/webhooks").json()] == [hook["id"]]
        assert api.get(f"/events/webhooks/{hook['id']}").json()["name"] == "lifecycle"
        sb = Sandbox.create(name="e2b-told", **allowing.client_args())
        sb.update(timeout_seconds=900)  # an update: not among the chosen events
        sb.kill()
        wait_for(lambda: [e["type"] for e in receiver.events()] == ["sandbox.lifecycle.created",
                                                                    "sandbox.lifecycle.killed"], 60,
                 "E2B's events at the receiver")
        for headers, body in receiver.got:
            expected = base64.b64encode(hashlib.sha256(b"e2b-secret" + body).digest()).decode().rstrip("=")
            assert headers["e2b-signature"] == expected and headers["e2b-signature-version"] == "v1"
            assert headers["e2b-webhook-id"] == hook["id"] and headers["e2b-delivery-id"]
        killed = receiver.events()[1]
        assert killed["sandboxId"] == sb.id and killed["eventData"] == {"kill_reason": "asked"}
        changed = api.patch(f"/events/webhooks/{hook['id']}", json={"enabled": False, "events": []})
        assert changed.status_code == 200 and changed.json()["enabled"] is False
        assert len(changed.json()["events"]) == 6, "none chosen: every lifecycle event"
        assert api.patch(f"/events/webhooks/{hook['id']}", json={"events": ["sandbox.lifecycle.exploded"]}
                         ).status_code == 400
        refused = api.post("/events/webhooks", json={"url": "http://10.0.0.1/", "signatureSecret": "s"})
        assert refused.status_code == 400 and refused.json()["code"] == 400
    finally:
        assert api.delete(f"/events/webhooks/{hook['id']}").status_code == 200
    assert api.get(f"/events/webhooks/{hook['id']}").status_code == 404


def test_the_cli_manages_webhooks_and_shows_their_deliveries(allowing: Server, receiver: Receiver) -> None:
    environ = {**os.environ, "HUTCH_API_KEY": allowing.admin_key(), "HUTCH_BASE_URL": allowing.url}

    def hutch(*args: str) -> str:
        ran = subprocess.run([*HUTCH, *args], capture_output=True, text=True, env=environ, timeout=120)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout

    webhook_id, secret = hutch("webhook", "create", receiver.url, "--type", "sandbox.created", "--name", "cli").split()
    try:
        assert secret.startswith("whsec_")
        listed = hutch("webhook", "ls")
        assert listed.splitlines()[0].split() == ["ID", "NAME", "URL", "TYPES", "STATE"] and webhook_id in listed
        sb = Sandbox.create(name="cli-told", **allowing.client_args())
        sb.kill()
        wait_for(lambda: len(receiver.got) == 1, 60, "the delivery")
        assert verify_webhook(receiver.got[0][1], receiver.got[0][0]["hutch-signature"], secret)["sandbox_id"] == sb.id
        shown = json.loads(hutch("--json", "webhook", "deliveries", webhook_id))
        assert [(d["attempt"], d["status"], d["ok"]) for d in shown] == [(1, 204, True)]
        hutch("webhook", "update", webhook_id, "--enabled", "false")
        assert "disabled" in hutch("webhook", "info", webhook_id)
    finally:
        hutch("webhook", "rm", webhook_id)
    assert webhook_id not in hutch("webhook", "ls")
