"""E2B's host form: `E2B_DOMAIN` (with E2B_API_KEY, and the CA in SSL_CERT_FILE) alone points every
e2b SDK line at hutch, over TLS, with `api.<domain>` and `<port>-<id>.<domain>` resolved by this
machine (nss-myhostname, which scripts/install sets up).

Each line runs unmodified in its own pinned venv (scripts/test makes them): e2b 1.x (through the
code interpreter 1.5.2 that pins it), 2.20.3 (which sends no E2b-Sandbox-Id after `connect`: the
token names the box), 2.45.1 and 2.63.0, the code interpreter 2.6.2, and camel-ai's interpreter,
which pins e2b-code-interpreter < 2. Then what a hostile client tries at those names.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch import Sandbox
from hutch.node import base_image
from hutch.services.config import DEFAULT_CACHE_DIR
from tests.integration.support import Env, client_result, needs_installed, wait_for

ROOT = Path(__file__).resolve().parents[2]
CLIENT = Path(__file__).resolve().parent / "e2b_clients" / "domain.py"
# venv under .cache -> what it holds (scripts/test installs each)
LINES = {"e2b-ci-1.5.2": "e2b 1.x with e2b-code-interpreter 1.5.2", "e2b-ci-2.6.2": "e2b 2.20.3 with e2b-code-interpreter 2.6.2",
         "e2b-2.45.1": "e2b 2.45.1", "e2b-2.63.0": "e2b 2.63.0", "camel-0.2.90": "camel-ai 0.2.90"}


def run_client(env: Env, venv: str, scenario: str) -> dict[str, Any]:
    python = ROOT / ".cache" / venv / "bin" / "python"
    needs_installed(f"{LINES[venv]} in {python.parent.parent}", python.exists())
    variables = {"PATH": "/usr/local/bin:/usr/bin:/bin", "E2B_API_KEY": env.server.e2b_key(),
                 "E2B_DOMAIN": env.server.client_env("E2B_DOMAIN"),
                 "SSL_CERT_FILE": env.server.client_env("SSL_CERT_FILE")}
    return client_result(python, CLIENT, [scenario], variables)


def tls(env: Env) -> ssl.SSLContext:
    """What a client that trusts hutch's CA (and nothing else) checks the listener with."""
    return ssl.create_default_context(cafile=Path(env.server.client_env("NODE_EXTRA_CA_CERTS")))


def url(env: Env, label: str, path: str = "/") -> str:
    return f"https://{label}.{env.server.client_env('E2B_DOMAIN')}{path}"


@pytest.mark.parametrize("venv", ["e2b-ci-1.5.2", "e2b-ci-2.6.2", "e2b-2.45.1", "e2b-2.63.0"])
def test_each_e2b_line_works_through_E2B_DOMAIN_alone(env: Env, venv: str) -> None:
    out = run_client(env, venv, "basics")
    domain = env.server.client_env("E2B_DOMAIN")
    assert out["envd_host"] == f"49983-{out['id']}.{domain}"
    assert out["echo"] == "hello from user\n"
    assert out["read"] == out["cat"] == "written by the SDK"
    assert out["connected"] == "written by the SDK"  # a second client, by id
    assert out["port"] == "written by the SDK"  # a server in the box, at its port's E2B host name
    r = httpx.get(url(env, "api", f"/sandboxes/{out['id']}"), headers={"X-API-KEY": env.server.e2b_key()},
                  verify=tls(env))
    assert r.status_code == 404  # killed


@pytest.mark.parametrize("venv", ["e2b-ci-1.5.2", "e2b-ci-2.6.2"])
def test_the_code_interpreters_run_code_through_E2B_DOMAIN_alone(env: Env, venv: str) -> None:
    needs_installed("the code interpreter's root (hutch build-base)",
                    base_image.is_built(DEFAULT_CACHE_DIR, base_image.CODE_INTERPRETER))
    out = run_client(env, venv, "run_code")
    assert (out["text"], out["stdout"], out["error"], out["echo"]) == ("42", ["printed\n"], None, "box\n")


def test_camel_ais_e2b_interpreter_which_pins_the_old_sdk_runs_code_on_hutch(env: Env) -> None:
    needs_installed("the code interpreter's root (hutch build-base)",
                    base_image.is_built(DEFAULT_CACHE_DIR, base_image.CODE_INTERPRETER))
    assert run_client(env, "camel-0.2.90", "camel")["python"].strip() == "42"


def _e2b_box(env: Env, secure: bool = True, **network: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"templateID": "base", "timeout": 120, "secure": secure}
    if network:
        body["network"] = network
    r = httpx.post(url(env, "api", "/sandboxes"), json=body, headers={"X-API-KEY": env.server.e2b_key()},
                   verify=tls(env), timeout=120)
    assert r.status_code == 201, r.text
    made: dict[str, Any] = r.json()
    return made


def _kill(env: Env, sandbox_id: str) -> None:
    httpx.delete(url(env, "api", f"/sandboxes/{sandbox_id}"), headers={"X-API-KEY": env.server.e2b_key()},
                 verify=tls(env), timeout=60)


def _envd(env: Env, sandbox_id: str, token: str | None, **headers: str) -> httpx.Response:
    sent = {"content-type": "application/json", **headers}
    if token is not None:
        sent["x-access-token"] = token
    return httpx.post(url(env, f"49983-{sandbox_id}", "/filesystem.Filesystem/Stat"), json={"path": "/tmp"},
                      headers=sent, verify=tls(env), timeout=60)


def test_the_host_names_the_box_and_a_wrong_token_learns_nothing(env: Env) -> None:
    a, b = _e2b_box(env), _e2b_box(env)
    try:
        assert _envd(env, a["sandboxID"], a["envdAccessToken"]).status_code == 200
        # the host names the box: another box's id in the header is replaced, not believed
        assert _envd(env, a["sandboxID"], b["envdAccessToken"], **{"E2b-Sandbox-Id": b["sandboxID"]}).status_code == 401
        # a wrong token, no token, a box that never was: one answer, so no id is confirmed
        answers = {(r.status_code, r.json()["code"]) for r in (
            _envd(env, a["sandboxID"], "hat_" + a["sandboxID"] + ".forged"),
            _envd(env, a["sandboxID"], None),
            _envd(env, "00000000-0000-4000-8000-000000000000", b["envdAccessToken"]),
            _envd(env, "00000000-0000-4000-8000-000000000000", "hat_00000000-0000-4000-8000-000000000000.x"))}
        assert len(answers) == 1 and next(iter(answers))[0] == 401, answers
    finally:
        _kill(env, a["sandboxID"])
        _kill(env, b["sandboxID"])


def test_on_the_path_form_a_token_alone_finds_its_box_and_only_its_own(env: Env) -> None:
    """e2b before 2.25.1 sends envd calls after `connect` with no E2b-Sandbox-Id."""
    a, b = _e2b_box(env), _e2b_box(env)
    try:
        def stat(token: str) -> httpx.Response:
            return httpx.post(f"{env.url}/e2b/envd/filesystem.Filesystem/Stat", json={"path": "/tmp"},
                              headers={"x-access-token": token}, timeout=60)
        assert stat(a["envdAccessToken"]).status_code == 200
        # a's MAC under b's id, or a token naming a box it was not made for: the same 401
        mac = a["envdAccessToken"].rpartition(".")[2]
        assert stat(f"hat_{b['sandboxID']}.{mac}").status_code == 401
        assert stat("hat_not-a-box.AAAA").status_code == 401
    finally:
        _kill(env, a["sandboxID"])
        _kill(env, b["sandboxID"])


def test_a_box_made_without_public_traffic_answers_on_its_ports_only_with_its_traffic_token(env: Env) -> None:
    box = _e2b_box(env, allowPublicTraffic=False)
    try:
        sid = box["sandboxID"]
        Sandbox.connect(sid).commands.spawn("cd /tmp && echo hi > p.txt && exec python3 -m http.server 8000")
        port = url(env, f"8000-{sid}", "/p.txt")

        def reached() -> bool:
            return httpx.get(port, headers={"e2b-traffic-access-token": box["trafficAccessToken"]},
                             verify=tls(env), timeout=30).status_code == 200
        wait_for(reached, 30)
        assert httpx.get(port, verify=tls(env), timeout=30).status_code == 401
        assert httpx.get(port, headers={"e2b-traffic-access-token": "hat_x.y"}, verify=tls(env)).status_code == 401
        info = httpx.get(url(env, "api", f"/sandboxes/{sid}"), headers={"X-API-KEY": env.server.e2b_key()},
                         verify=tls(env)).json()
        assert info["network"]["allowPublicTraffic"] is False
    finally:
        _kill(env, box["sandboxID"])


def test_a_name_hutch_does_not_serve_is_a_404_and_the_certificate_is_only_for_its_domain(env: Env) -> None:
    port = env.server.e2b_port
    r = httpx.get(f"https://127.0.0.1:{port}/health", verify=False)  # the name is what is checked
    assert r.status_code == 404 and "not a host this server serves" in r.json()["message"]
    with pytest.raises(httpx.ConnectError):  # its certificate names the domain and the names below it only
        httpx.get(f"https://127.0.0.1:{port}/", verify=tls(env))


def test_lifecycle_auto_resume_on_a_port_request_wakes_the_box_and_off_only_connect_does(env: Env) -> None:
    out = run_client(env, "e2b-2.63.0", "auto_resume")
    assert out["paused"] == ["paused", "paused"]
    assert (out["woken_by_port"], out["waking_after"]) == ("200 awake", "running")  # its server still serving
    assert out["not_woken_by_port"] == "409" and out["envd_on_paused"] == "SandboxNotRunningException"
    assert out["sleeping_after"] == "paused"
    assert out["after_connect"] == "200 awake"


def test_a_public_box_keeps_its_interpreter_port_and_its_sleep_to_token_holders(env: Env) -> None:
    """allowPublicTraffic opens a box's ports, but not its code interpreter's (49999) unless the box
    was made with secure=false (e2b 1.x's); and a request without the token wakes a paused box only
    when it was made with auto-resume."""
    secure, open_ = _e2b_box(env), _e2b_box(env, secure=False)
    try:
        for made in (secure, open_):
            Sandbox.connect(made["sandboxID"]).commands.spawn(
                "cd /tmp && echo hi > p.txt && (python3 -m http.server 8000 & exec python3 -m http.server 49999)")

        def get(made: dict[str, Any], port: int, token: str | None = None) -> int:
            headers = {"e2b-traffic-access-token": token} if token else {}
            return httpx.get(url(env, f"{port}-{made['sandboxID']}", "/p.txt"), headers=headers, verify=tls(env),
                             timeout=60).status_code

        wait_for(lambda: get(secure, 49999, secure["trafficAccessToken"]) == 200 == get(open_, 49999), 30)
        assert get(secure, 8000) == 200  # public
        # a body to a port is read whole, so bounded, whatever its path says (an upload's is exempt elsewhere)
        big = httpx.put(url(env, f"8000-{secure['sandboxID']}", "/x/files"), content=b"x" * (2 * 2**20),
                        verify=tls(env), timeout=60)
        assert big.status_code == 413, big.text
        assert get(secure, 49999) == 401  # but not its interpreter's port
        assert get(open_, 49999) == 200  # secure=false: that too
        paused = httpx.post(url(env, "api", f"/sandboxes/{secure['sandboxID']}/pause"), verify=tls(env),
                            headers={"X-API-KEY": env.server.e2b_key()}, timeout=120)
        assert paused.status_code == 204, paused.text
        assert get(secure, 8000) == 409  # no token: it sleeps on
        info = httpx.get(url(env, "api", f"/sandboxes/{secure['sandboxID']}"), verify=tls(env),
                         headers={"X-API-KEY": env.server.e2b_key()}).json()
        assert info["state"] == "paused"
        assert get(secure, 8000, secure["trafficAccessToken"]) == 200  # the token wakes it
    finally:
        _kill(env, secure["sandboxID"])
        _kill(env, open_["sandboxID"])
