"""A wrong token says nothing of other boxes: the same answer for a real box and a made-up id,
on hutch's data plane and on E2B's envd (health included), and a killed box is "gone" only to
the caller whose token was good for it."""

from __future__ import annotations

import httpx

from hutch import Sandbox
from tests.integration.support import Env

MADE_UP = "00000000-0000-4000-8000-000000000000"


def _answer(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.text


def test_data_plane_answers_a_bad_token_alike_for_any_box(env: Env) -> None:
    box = Sandbox.create(name="uniform")
    try:
        for token in ("hat_" + "x" * 43, box._dp.token + "x"):
            real = httpx.post(f"{env.url}/data/v1/sandboxes/{box.id}/commands/run", json={"command": "true"},
                              headers={"X-Access-Token": token})
            fake = httpx.post(f"{env.url}/data/v1/sandboxes/{MADE_UP}/commands/run", json={"command": "true"},
                              headers={"X-Access-Token": token})
            assert real.status_code == 401 and _answer(real) == _answer(fake)
        real = httpx.get(f"{env.url}/data/v1/sandboxes/{box.id}/files", params={"path": "/etc/hostname"})
        fake = httpx.get(f"{env.url}/data/v1/sandboxes/{MADE_UP}/files", params={"path": "/etc/hostname"})
        assert real.status_code == 401 and _answer(real) == _answer(fake)
        token = box._dp.token
    finally:
        box.kill()
    gone = httpx.post(f"{env.url}/data/v1/sandboxes/{box.id}/commands/run", json={"command": "true"},
                      headers={"X-Access-Token": token})
    assert gone.status_code == 404  # its own token: told the box is gone


def _e2b_box(env: Env) -> tuple[str, str]:
    r = httpx.post(f"{env.url}/e2b/sandboxes", headers={"X-API-KEY": env.server.e2b_key()},
                   json={"templateID": "base", "timeout": 120}, timeout=120)
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"], r.json()["envdAccessToken"]


def test_envd_answers_a_bad_token_alike_and_health_needs_the_token(env: Env) -> None:
    box, token = _e2b_box(env)
    envd = f"{env.url}/e2b/envd"
    try:
        for bad in (None, "x" * 40):
            auth = {"X-Access-Token": bad} if bad else {}
            for method, path, body in (("GET", "/health", None), ("POST", "/process.Process/List", {}),
                                       ("GET", "/files?path=/etc/hostname", None)):
                real = httpx.request(method, envd + path, json=body, headers={"E2b-Sandbox-Id": box, **auth})
                fake = httpx.request(method, envd + path, json=body, headers={"E2b-Sandbox-Id": MADE_UP, **auth})
                assert real.status_code == 401, (path, real.text)
                assert _answer(real) == _answer(fake), path
        health = httpx.get(envd + "/health", headers={"E2b-Sandbox-Id": box, "X-Access-Token": token})
        assert health.status_code == 204
    finally:
        httpx.delete(f"{env.url}/e2b/sandboxes/{box}", headers={"X-API-KEY": env.server.e2b_key()})
    gone = httpx.get(envd + "/health", headers={"E2b-Sandbox-Id": box, "X-Access-Token": token})
    assert gone.status_code == 502 and "not found" in gone.json()["message"]  # E2B's answer for a gone box
