"""Egress end to end: real boxes, the real proxy, and test hosts in a network namespace
(198.51.100.2 and 198.51.100.3, see tests/integration/internet.py). Names resolve through the test
server's hosts map only; nothing leaves this machine."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hutch import NetworkConfig, NotFoundError, Sandbox
from tests.integration.internet import Internet
from tests.integration.support import Env, logged

FETCH = r"""
import json, ssl, sys, urllib.error, urllib.request
ctx = ssl._create_unverified_context()
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=20, context=ctx)
    out = {"status": r.status, "body": r.read().decode(), "egress": r.headers.get("X-Hutch-Egress")}
except urllib.error.HTTPError as e:
    out = {"status": e.code, "body": e.read().decode(), "egress": e.headers.get("X-Hutch-Egress")}
except (urllib.error.URLError, OSError) as e:
    out = {"status": None, "error": str(getattr(e, "reason", e))}
print(json.dumps(out))
"""


def fetch(box: Any, url: str) -> dict[str, Any]:
    """GET `url` from inside the box with Python's urllib, which finds the proxy in the env."""
    box.files.write("/tmp/fetch.py", FETCH)
    r = box.commands.run(f"python3 /tmp/fetch.py '{url}'", timeout_seconds=60)
    assert r.exit_code == 0, r.stderr
    result: dict[str, Any] = json.loads(r.stdout)
    return result


def newest(box: Any, host: str) -> Any:
    return logged(box, host)[0]


def test_by_default_a_box_reaches_public_hosts_over_http_and_https(box: Any, internet: Internet) -> None:
    plain = fetch(box, "http://example.test/hello?x=1")
    assert plain["status"] == 200
    assert json.loads(plain["body"]) == {"host": "example.test", "path": "/hello?x=1", "sni": None, "tls": False}
    secure = fetch(box, "https://api.example.test/")
    assert secure["status"] == 200 and json.loads(secure["body"])["sni"] == "api.example.test"
    curl = box.commands.run("curl -sS -k https://example.test/ && curl -sS http://198.51.100.2/ip-literal")
    assert curl.exit_code == 0 and '"sni": "example.test"' in curl.stdout and '"/ip-literal"' in curl.stdout
    entry = newest(box, "api.example.test")
    assert (entry.port, entry.ip, entry.verdict, entry.rule) == (443, "198.51.100.2", "allowed", "default")
    assert entry.bytes_out > 0 and entry.bytes_in > 0


def test_without_the_proxy_there_is_no_way_out(box: Any, internet: Internet) -> None:
    r = box.commands.run("env -u http_proxy -u HTTP_PROXY curl -sS --max-time 10 http://198.51.100.2/")
    assert r.exit_code != 0, "a box has no network card: the relay is the only road"


ALWAYS_DENIED_URLS = [
    "http://private.example.test/", "https://private.example.test/",  # a name that resolves to 10.1.2.3
    "http://169.254.169.254/latest/meta-data/", "http://metadata.example.test/",
    "http://loopback.example.test/", "http://[::1]/", "http://[fe80::1]/", "http://[::ffff:127.0.0.1]/",
    "http://10.0.0.1/", "http://192.168.1.1/", "http://172.16.0.1/", "http://100.64.0.1/",
    "http://198.51.100.1/",  # the host's own end of the veth: one of the host's addresses
]


def test_private_link_local_loopback_and_host_addresses_cannot_be_allowed(make_box: Any, internet: Internet) -> None:
    box = make_box(network=NetworkConfig(allow_out=["0.0.0.0/0", "::/0", "*.example.test", "10.0.0.0/8",
                                                    "169.254.0.0/16", "127.0.0.0/8", "198.51.100.0/24"]))
    for i, url in enumerate(ALWAYS_DENIED_URLS):
        result = fetch(box, url)
        if url.startswith("http:"):
            assert result["status"] == 403 and result["egress"].startswith("always_denied:"), (url, result)
        else:
            assert "403" in result["error"], (url, result)
        entry = logged(box, count=i + 1)[0]
        assert entry.verdict == "denied" and entry.rule.startswith("always_denied:"), (url, entry)


def test_the_servers_own_api_on_loopback_is_out_of_reach(box: Any, env: Env, internet: Internet) -> None:
    direct = box.commands.run(f"curl -sS --max-time 10 {env.url}/health")
    assert direct.exit_code != 0, "127.0.0.1 in a box is the box's own loopback"
    proxied = box.commands.run(f"curl -sS -D - --noproxy '' --proxy http://127.0.0.1:3128 {env.url}/health")
    assert proxied.stdout.startswith("HTTP/1.1 403") and "X-Hutch-Egress: always_denied:127.0.0.0/8" in proxied.stdout
    assert '"status"' not in proxied.stdout


def test_a_strict_allow_list_with_wildcards(make_box: Any, internet: Internet) -> None:
    box = make_box(network=NetworkConfig(allow_out=["*.example.test"], deny_out=["0.0.0.0/0"]))
    assert fetch(box, "http://api.example.test/")["status"] == 200
    assert fetch(box, "https://deep.sub.example.test/")["status"] == 200, "a wildcard matches at any depth"
    apex = fetch(box, "http://example.test/")
    assert apex["status"] == 403 and apex["egress"] == "deny_out:0.0.0.0/0", "a wildcard does not match the apex"
    assert fetch(box, "http://other.test/")["status"] == 403
    assert fetch(box, "http://198.51.100.2/")["status"] == 403, "an address is not a name on the allow list"
    assert newest(box, "api.example.test").rule == "allow_out:*.example.test"


def test_a_denied_cidr_and_allow_winning_over_deny(make_box: Any, internet: Internet) -> None:
    box = make_box(network=NetworkConfig(deny_out=["198.51.100.3/32"]))
    denied = fetch(box, "http://denied.test/")
    assert denied["status"] == 403 and denied["egress"] == "deny_out:198.51.100.3/32"
    assert "403" in fetch(box, "https://198.51.100.3/")["error"]
    assert fetch(box, "http://example.test/")["status"] == 200
    both = make_box(network=NetworkConfig(allow_out=["198.51.100.3/32"], deny_out=["198.51.100.0/24"]))
    assert fetch(both, "http://denied.test/")["status"] == 200
    assert fetch(both, "http://example.test/")["status"] == 403


def test_an_allowed_name_that_resolves_to_a_private_address_is_denied(make_box: Any, internet: Internet) -> None:
    box = make_box(network=NetworkConfig(allow_out=["private.example.test"], deny_out=["0.0.0.0/0"]))
    result = fetch(box, "http://private.example.test/")
    assert result["status"] == 403 and result["egress"] == "always_denied:10.0.0.0/8"


def test_rules_change_live_for_the_next_connection(box: Any, internet: Internet) -> None:
    assert fetch(box, "http://example.test/")["status"] == 200
    info = box.update(network=NetworkConfig(deny_out=["0.0.0.0/0"]))
    assert info.network == NetworkConfig(allow_out=[], deny_out=["0.0.0.0/0"])
    assert fetch(box, "http://example.test/")["status"] == 403
    box.update(network=NetworkConfig(allow_out=["example.test"], deny_out=["0.0.0.0/0"]))
    assert fetch(box, "http://example.test/")["status"] == 200
    box.update(network=None)
    assert box.get_info().network is None and fetch(box, "http://other.test/")["status"] == 200


MISMATCH = r"""
import socket, ssl, sys
def proxy():
    return socket.create_connection(("127.0.0.1", 3128), timeout=20)
s = proxy()
s.sendall(b"GET http://example.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
print(s.recv(4096).split(b"\r\n")[0].decode())
s = proxy()
s.sendall(b"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n")
print(s.recv(4096).split(b"\r\n")[0].decode())
ctx = ssl._create_unverified_context()
try:
    ctx.wrap_socket(s, server_hostname="other.test")
    print("handshake done")
except (OSError, ssl.SSLError) as e:
    print("handshake failed")
"""


def test_the_host_header_and_the_tls_name_must_match_what_was_checked(box: Any, internet: Internet) -> None:
    box.files.write("/tmp/mismatch.py", MISMATCH)
    r = box.commands.run("python3 /tmp/mismatch.py", timeout_seconds=60)
    assert r.stdout.splitlines() == ["HTTP/1.1 403 Forbidden", "HTTP/1.1 200 Connection established",
                                     "handshake failed"], r.stdout + r.stderr
    rules = {(e.host, e.rule) for e in logged(box, "example.test", count=2)}
    assert ("example.test", "sni_mismatch") in rules and ("example.test", "host_mismatch") in rules


def test_the_network_log_pages_and_belongs_to_its_team(box: Any, env: Env, internet: Internet) -> None:
    for path in ("a", "b", "c"):
        assert fetch(box, f"http://example.test/{path}")["status"] == 200
    fetch(box, "http://denied.test/")  # allowed by default
    logged(box, count=4)
    first = box.get_network_log(limit=2)
    assert len(first.entries) == 2 and first.next_before == first.entries[-1].id
    assert first.entries[0].id > first.entries[1].id, "newest first"
    rest = box.get_network_log(limit=100, before=first.next_before)
    assert rest.next_before is None and len(rest.entries) >= 2
    assert all(e.id < first.entries[-1].id for e in rest.entries)
    assert first.entries[0].at >= rest.entries[0].at
    with pytest.raises(NotFoundError):
        Sandbox.get_network_log_by_id(box.id, api_key=env.key_b, base_url=env.url)


def test_egress_works_again_after_pause_and_resume(box: Any, internet: Internet) -> None:
    assert fetch(box, "http://example.test/")["status"] == 200
    box.pause()
    box.resume()
    assert fetch(box, "http://example.test/after")["status"] == 200


def test_bad_rules_are_400_and_make_nothing(env: Env) -> None:
    with env.api() as api:
        before = len(api.get("/v1/sandboxes").json())
        for network in ({"allow_out": ["not a domain!"]}, {"deny_out": ["example.com"]}, {"allow_out": ["*.*.x.com"]},
                        {"allow_out": ["10.0.0.0/33"]}, {"allow_out": ["a.com"] * 257}, {"allow_out": "a.com"},
                        {"allow_out": [], "extra": 1}):
            r = api.post("/v1/sandboxes", json={"name": "bad", "network": network})
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", (network, r.text)
        assert len(api.get("/v1/sandboxes").json()) == before


def test_curl_git_and_pip_find_the_proxy_by_themselves(box: Any, internet: Internet) -> None:
    tools = {"curl": "curl -sS http://example.test/curl",
             "git": "git ls-remote http://example.test/repo.git",
             "pip": "python3 -m pip download --no-deps -d /tmp/x --trusted-host example.test "
                    "--index-url http://example.test/simple nothing"}
    for tool, command in tools.items():
        before = len(box.get_network_log(limit=1000).entries)
        box.commands.run(command, timeout_seconds=120)  # git and pip fail on what the test host answers
        entries = logged(box, count=before + 1, limit=1000, what=f"{tool} to go through the proxy")
        assert entries[0].host == "example.test" and entries[0].verdict == "allowed", tool
