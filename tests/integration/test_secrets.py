"""Secrets end to end: real boxes, the real egress proxy terminating TLS with hutch's CA, and an
HTTPS test host in a network namespace (tests/integration/internet.py) that logs what really arrived. The
test host never echoes a header back, so the only way the real value could enter a box is a
hutch bug, which is what the greps look for."""

from __future__ import annotations

import secrets as random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch import AsyncSecret, NetworkConfig, NotFoundError, Provider, Sandbox, Secret, ValidationError
from hutch.sdk.errors import ConflictError
from tests.integration.internet import Internet
from tests.integration.support import HUTCH, Env, logged, wait_for

pytestmark = pytest.mark.usefixtures("internet")


def real_value() -> str:
    return "sk-ant-REAL-" + random.token_hex(16)


@pytest.fixture
def secret() -> Iterator[tuple[Secret, str]]:
    value = real_value()
    s = Secret.create(name=f"anthropic-{random.token_hex(4)}", value=value, provider="anthropic")
    yield s, value
    try:
        s.delete()
    except NotFoundError:
        pass


def requests_with(internet: Internet, text: str) -> list[dict[str, Any]]:
    return [r for r in internet.seen() if any(text in v for v in r["headers"].values())]


def curl(box: Any, url: str, *headers: str, user: str | None = None) -> Any:
    """curl in the box, checking TLS with the box's own trust store (no -k)."""
    args = " ".join(f'-H "{h}"' for h in headers)  # double quotes: the shell expands $VARS
    return box.commands.run(f"curl -sS --max-time 20 -o /dev/null -w '%{{http_code}}' {args} {url}",
                            timeout_seconds=60, user=user)


def test_the_seeds_example_a_box_uses_a_key_it_never_sees(sdk: Any, secret: tuple[Secret, str], internet: Internet,
                                                          env: Env) -> None:
    s, value = secret
    box = sdk.create(name="research-agent", secrets={"ANTHROPIC_API_KEY": s.name},
                     network=NetworkConfig(allow_out=["api.anthropic.com"], deny_out=["0.0.0.0/0"]))
    try:
        standin = box.commands.run("printenv ANTHROPIC_API_KEY").stdout.strip()
        assert standin.startswith("hutch_standin_") and value not in standin
        # what a client library does: the key in its header, over TLS the box checks itself
        r = curl(box, "https://api.anthropic.com/v1/messages", "x-api-key: $ANTHROPIC_API_KEY")
        assert (r.exit_code, r.stdout) == (0, "200"), r.stderr
        arrived = [q for q in internet.seen() if q["path"] == "/v1/messages"]
        assert arrived[-1]["headers"]["x-api-key"] == value, "the real key reached the real host"
        assert not requests_with(internet, standin), "the stand-in never left the proxy"
        # Python's own TLS in the box trusts the same store (SSL_CERT_FILE)
        py = box.commands.run(
            "python3 -c \"import os, urllib.request as u; r = u.Request('https://api.anthropic.com/v1/models', "
            "headers={'x-api-key': os.environ['ANTHROPIC_API_KEY']}); print(u.urlopen(r, timeout=20).status)\"")
        assert py.stdout.strip() == "200", py.stderr

        entry = logged(box, "api.anthropic.com", count=2)[0]
        assert entry.verdict == "allowed" and entry.secrets == [s.name]
        audit = s.audit(sandbox_id=box.id).entries
        assert [(a.host, a.method, a.path, a.status, a.env) for a in audit][:2] == [
            ("api.anthropic.com", "GET", "/v1/models", 200, "ANTHROPIC_API_KEY"),
            ("api.anthropic.com", "GET", "/v1/messages", 200, "ANTHROPIC_API_KEY")]

        # nothing in the box holds the value: environments, files, and (below) its memory. The box
        # is told only the value's shape, so the search itself brings no value in.
        shape = "sk-ant-REAL-[0-9a-f]\\{32\\}"
        search = box.commands.run(f"grep -rl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -- '{shape}' / ; "
                                  f"cat /proc/[0-9]*/environ | tr '\\0' '\\n' | grep -c -- '{shape}'", user="root",
                                  timeout_seconds=120)
        assert search.stdout.strip() == "0", search.stdout
        planted = box.commands.run(f"echo sk-ant-REAL-{'ab' * 16} > /tmp/decoy; grep -rl -- '{shape}' /tmp")
        assert planted.stdout.strip() == "/tmp/decoy", "the search finds what it looks for"
        box.pause()
        image = env.server.data_dir / "checkpoints" / box.id
        files = [p for p in image.rglob("*") if p.is_file()]
        assert files and sum(p.stat().st_size for p in files) > 1_000_000, "a checkpoint image to search"
        assert not any(value.encode() in p.read_bytes() for p in files), "the real value is in the box's memory"
        assert box.commands.run("printenv ANTHROPIC_API_KEY").stdout.strip() == standin  # resumed, same stand-in
    finally:
        box.kill()


def test_the_stand_in_is_useless_anywhere_else(make_box: Any, secret: tuple[Secret, str], internet: Internet) -> None:
    s, value = secret
    box = make_box(secrets={"KEY": s.name})
    standin = box.commands.run("printenv KEY").stdout.strip()
    # another host: the TLS is not even terminated (the test host's own certificate, end to end)
    r = curl(box, "https://example.test/elsewhere", "x-api-key: $KEY")
    assert (r.exit_code, r.stdout) == (0, "200"), r.stderr
    assert requests_with(internet, standin)[-1]["path"] == "/elsewhere"
    sni = box.commands.run("curl -sS https://example.test/who").stdout
    assert '"sni": "example.test"' in sni
    # the secret's host, but not the scheme's header: passed on as it is
    r = curl(box, "https://api.anthropic.com/other-header", "authorization: Bearer $KEY")
    assert r.stdout == "200"
    assert requests_with(internet, standin)[-1]["path"] == "/other-header"
    # plain HTTP to the secret's host never gets the value
    r = curl(box, "http://api.anthropic.com/plain", "x-api-key: $KEY")
    assert requests_with(internet, standin)[-1]["path"] == "/plain"
    # a request inside the tunnel that names another site is refused before it goes anywhere
    r = curl(box, "https://api.anthropic.com/smuggled", "x-api-key: $KEY", "Host: example.test")
    assert r.stdout == "403"
    assert not [q for q in internet.seen() if q["path"] == "/smuggled"]
    assert all(q["headers"]["host"] == "api.anthropic.com" for q in requests_with(internet, value)), \
        "the real value went only to its host"


def test_rotation_applies_to_the_next_request(make_box: Any, secret: tuple[Secret, str], internet: Internet) -> None:
    s, first = secret
    box = make_box(secrets={"ANTHROPIC_API_KEY": s.name})
    before, after = f"/{s.name}/before", f"/{s.name}/after"
    assert curl(box, f"https://api.anthropic.com{before}", "x-api-key: $ANTHROPIC_API_KEY").stdout == "200"
    second = real_value()
    s.rotate(second)
    assert s.version == 2
    assert curl(box, f"https://api.anthropic.com{after}", "x-api-key: $ANTHROPIC_API_KEY").stdout == "200"
    got = {q["path"]: q["headers"]["x-api-key"] for q in internet.seen() if q["path"] in (before, after)}
    assert got == {before: first, after: second}


def test_keep_alive_requests_each_get_the_current_value(make_box: Any, secret: tuple[Secret, str],
                                                        internet: Internet) -> None:
    """Two requests on one connection, the secret rotated between them."""
    s, first = secret
    box = make_box(secrets={"ANTHROPIC_API_KEY": s.name})
    # http.client does not read HTTPS_PROXY: it tunnels through the box's proxy port by hand
    box.files.write("/tmp/ka.py", "import http.client, os, sys\n"
                    "c = http.client.HTTPSConnection('127.0.0.1', 3128)\n"
                    "c.set_tunnel('api.anthropic.com', 443)\n"
                    "h = {'x-api-key': os.environ['ANTHROPIC_API_KEY']}\n"
                    f"for path in ('/{s.name}/ka-1', '/{s.name}/ka-2'):\n"
                    "    c.request('GET', path, headers=h); r = c.getresponse(); r.read(); print(r.status, flush=True)\n"
                    "    sys.stdin.readline()\n")
    lines: list[str] = []
    proc = box.commands.spawn("python3 /tmp/ka.py", on_stdout=lines.append)
    try:
        wait_for(lambda: "200" in "".join(lines), 30)
        second = real_value()
        s.rotate(second)
        proc.stdin.write("next\n")
        wait_for(lambda: "".join(lines).count("200") == 2, 30)
        proc.stdin.write("done\n")
        assert proc.wait(timeout=30) == 0
    finally:
        proc.close()
    got = {q["path"].rsplit("/", 1)[1]: q["headers"]["x-api-key"] for q in internet.seen()
           if q["path"].startswith(f"/{s.name}/ka-")}
    assert got == {"ka-1": first, "ka-2": second}
    entries = logged(box, "api.anthropic.com")
    assert len(entries) == 1, "both requests went on one connection"


def test_a_detach_applies_to_an_open_connection(make_box: Any, secret: tuple[Secret, str],
                                               internet: Internet) -> None:
    """Two requests on one kept-alive connection, the secret detached between them."""
    s, value = secret
    box = make_box(secrets={"ANTHROPIC_API_KEY": s.name})
    standin = box.commands.run("printenv ANTHROPIC_API_KEY").stdout.strip()
    box.files.write("/tmp/ka.py", "import http.client, os, sys\n"
                    "c = http.client.HTTPSConnection('127.0.0.1', 3128)\n"
                    "c.set_tunnel('api.anthropic.com', 443)\n"
                    f"for path in ('/{s.name}/d-1', '/{s.name}/d-2'):\n"
                    "    c.request('GET', path, headers={'x-api-key': sys.argv[1]}); r = c.getresponse(); r.read()\n"
                    "    print(r.status, flush=True); sys.stdin.readline()\n")
    lines: list[str] = []
    proc = box.commands.spawn(f"python3 /tmp/ka.py {standin}", on_stdout=lines.append)
    try:
        wait_for(lambda: "200" in "".join(lines), 30)
        box.detach_secret("ANTHROPIC_API_KEY")
        proc.stdin.write("next\n")
        wait_for(lambda: "".join(lines).count("200") == 2, 30)
    finally:
        proc.close()
    got = {q["path"].rsplit("/", 1)[1]: q["headers"]["x-api-key"] for q in internet.seen()
           if q["path"].startswith(f"/{s.name}/d-")}
    assert got == {"d-1": value, "d-2": standin}


def test_attach_detach_and_revoke(sdk: Any, make_box: Any, secret: tuple[Secret, str], internet: Internet) -> None:
    s, value = secret
    box = make_box()
    assert box.secrets == [] and box.commands.run("printenv KEY").exit_code == 1
    bindings = box.attach_secret("KEY", s.name)
    assert [(b.env, b.secret, b.revoked) for b in bindings] == [("KEY", s.name, False)]
    standin = box.commands.run("printenv KEY").stdout.strip()
    assert standin.startswith("hutch_standin_")
    assert curl(box, "https://api.anthropic.com/attached", "x-api-key: $KEY").stdout == "200"
    assert internet.seen()[-1]["headers"]["x-api-key"] == value

    # on a paused box too; the next process after resume sees it
    box.pause()
    box.attach_secret("OTHER", s.name)
    assert sdk.connect(box.id).commands.run("printenv OTHER").stdout.strip().startswith("hutch_standin_")
    box.detach_secret("OTHER")
    assert box.commands.run("printenv OTHER").exit_code == 1
    with pytest.raises(NotFoundError):
        box.detach_secret("OTHER")

    # deleting the secret revokes the binding: the stand-in is no longer swapped; its history stays readable
    s.delete()
    assert "/attached" in [e.path for e in Secret.audit_by_name(s.name).entries]
    info = box.get_info()
    assert [(b.env, b.revoked) for b in info.secrets] == [("KEY", True)] and box.secrets[0].revoked
    assert curl(box, "https://api.anthropic.com/revoked", "x-api-key: $KEY").stdout == "200"
    assert internet.seen()[-1]["headers"]["x-api-key"] == standin


def test_bad_secrets_are_refused_and_change_nothing(env: Env, secret: tuple[Secret, str]) -> None:
    s, _ = secret
    before = len(Sandbox.list())
    with pytest.raises(ValidationError):
        Sandbox.create(name="x", env_vars={"KEY": "plain"}, secrets={"KEY": s.name})
    with pytest.raises(NotFoundError):
        Sandbox.create(name="x", secrets={"KEY": "no-such-secret"})
    assert len(Sandbox.list()) == before, "nothing was created"

    refused: list[tuple[dict[str, Any], type[Exception]]] = [
        ({"provider": "no-such-provider"}, ValidationError),
        ({}, ValidationError),  # no provider and no hosts: it could go nowhere
        ({"allowed_hosts": ["10.0.0.0/8"]}, ValidationError),
        ({"allowed_hosts": ["api.example.test"], "auth": {"header": "x-key", "format": "no placeholder"}},
         ValidationError),
        ({"allowed_hosts": ["api.example.test"], "auth": {"header": "bad header", "format": "{value}"}},
         ValidationError),
    ]
    for kwargs, kind in refused:
        with pytest.raises(kind):
            Secret.create(name="bad-" + random.token_hex(3), value="v", **kwargs)
    for value in ("line\r\nInjected: yes", "trailing-space ", " leading"):
        with pytest.raises(ValidationError):
            Secret.create(name="bad-value", value=value, allowed_hosts=["api.example.test"])
    with pytest.raises(ConflictError):
        Secret.create(name=s.name, value="again", provider="anthropic")
    names = [x.name for x in Secret.list()]
    assert s.name in names and not any(n.startswith("bad-") for n in names)
    # another team sees none of it
    with pytest.raises(NotFoundError):
        Secret.get(s.name, api_key=env.key_b)
    with pytest.raises(NotFoundError):
        Sandbox.create(name="x", secrets={"KEY": s.name}, api_key=env.key_b)


def test_values_are_never_returned_nor_stored_in_clear(env: Env) -> None:
    value = real_value()
    s = Secret.create(name="gh-" + random.token_hex(3), value=value, provider="github")
    try:
        assert (s.allowed_hosts, s.auth.header, s.auth.format) == (["api.github.com"], "authorization", "Bearer {value}")
        for body in (httpx.get(f"{env.url}/v1/secrets", headers={"Authorization": f"Bearer {env.key_a}"}).text,
                     httpx.get(f"{env.url}/v1/secrets/{s.name}", headers={"Authorization": f"Bearer {env.key_a}"}).text):
            assert s.name in body and value not in body
        db = env.server.data_dir / "hutch.db"
        con = sqlite3.connect(db)
        con.execute("PRAGMA wal_checkpoint(FULL)")
        con.close()
        on_disk = b"".join(p.read_bytes() for p in env.server.data_dir.glob("hutch.db*"))
        assert s.name.encode() in on_disk and value.encode() not in on_disk, "sealed at rest"
        assert value not in env.server.log.read_text(errors="replace")
        providers = {p.name: p for p in Provider.list()}
        assert {"anthropic", "openai", "gemini", "github"} <= set(providers)
        assert providers["anthropic"].auth.header == "x-api-key" and providers["openai"].env == "OPENAI_API_KEY"
    finally:
        s.delete()


def test_the_async_secret_api(env: Env) -> None:
    import asyncio

    async def go() -> None:
        s = await AsyncSecret.create(name="oa-" + random.token_hex(3), value=real_value(), provider="openai")
        assert [x.name for x in await AsyncSecret.list() if x.name == s.name] == [s.name]
        await s.rotate(real_value())
        assert (await AsyncSecret.get(s.name)).version == 2
        assert (await s.audit()).entries == []
        await AsyncSecret.delete_by_name(s.name)
        with pytest.raises(NotFoundError):
            await AsyncSecret.get(s.name)
        assert "openai" in [p.name for p in await Provider.list_async()]

    asyncio.run(go())


def test_cli_secrets(env: Env, internet: Internet, tmp_path: Path) -> None:
    name = "cli-" + random.token_hex(3)
    value = real_value()
    environ = {"HUTCH_API_KEY": env.key_a, "HUTCH_BASE_URL": env.url, "MY_KEY": value, "PATH": "/usr/bin:/bin"}

    def hutch(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*HUTCH, *args], capture_output=True, text=True, env=environ, input=stdin, timeout=120)

    made = hutch("secret", "create", name, "--provider", "anthropic", "--from-env", "MY_KEY")
    assert made.returncode == 0 and value not in made.stdout + made.stderr, made.stderr
    listed = hutch("secret", "ls")
    assert name in listed.stdout and "api.anthropic.com" in listed.stdout and value not in listed.stdout
    box_id = hutch("create", "--secret", f"ANTHROPIC_API_KEY={name}").stdout.strip()
    try:
        r = hutch("exec", box_id, "--", "sh", "-c",
                  "curl -sS -o /dev/null -w '%{http_code}' -H \"x-api-key: $ANTHROPIC_API_KEY\" https://api.anthropic.com/cli")
        assert r.stdout == "200", r.stderr
        assert internet.seen()[-1]["headers"]["x-api-key"] == value
        audit = hutch("secret", "audit", name)
        assert "/cli" in audit.stdout and box_id in audit.stdout
        rotated = hutch("secret", "rotate", name, stdin="sk-new\n")
        assert "version 2" in rotated.stdout
        assert "anthropic" in hutch("providers").stdout
    finally:
        hutch("kill", box_id)
        assert hutch("secret", "rm", name).returncode == 0
    assert hutch("secret", "rm", name).returncode == 1  # gone


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-x", "-q"]))


@pytest.mark.parametrize("client", ["python", "curl"])
def test_a_large_answer_through_a_swapped_connection_arrives_whole(box: Any, secret: tuple[Secret, str],
                                                                    client: str) -> None:
    """The proxy relays every byte and closes only after it has gone, whoever closes first."""
    s, _ = secret
    box.attach_secret("KEY", s.name)
    size = 24 * 2**20
    url = f"https://api.anthropic.com/big/{size}"
    command = (f"python3 -c \"import os, urllib.request as u; print(len(u.urlopen(u.Request('{url}', "
               f"headers={{'x-api-key': os.environ['KEY']}}), timeout=60).read()))\"" if client == "python"
               else f"curl -sS -H \"x-api-key: $KEY\" {url} | wc -c")
    r = box.commands.run(command, timeout_seconds=120)
    assert r.stdout.strip() == str(size), r.stderr


HOSTILE = r"""
import socket, ssl, sys
def tunnel(raw):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\n")
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    t = ssl.create_default_context().wrap_socket(s, server_hostname="api.anthropic.com")
    t.sendall(raw)
    out = b""
    try:
        while chunk := t.recv(65536):
            out += chunk
    except (ssl.SSLError, OSError):
        pass
    return out.split(b"\r\n", 1)[0].decode() or "closed"
for raw in (b"GARBAGE\r\n\r\n",
            b"GET http://example.test/ HTTP/1.1\r\nHost: api.anthropic.com\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: api.anthropic.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: api.anthropic.com\r\nHost: example.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: api.anthropic.com\r\nX-Long: " + b"a" * 100000 + b"\r\n\r\n"):
    print(tunnel(raw), flush=True)
"""


def test_hostile_requests_inside_a_swapped_tunnel_go_nowhere(box: Any, secret: tuple[Secret, str],
                                                             internet: Internet) -> None:
    s, _ = secret
    box.attach_secret("KEY", s.name)
    count = len(internet.seen())
    box.files.write("/tmp/hostile.py", HOSTILE)
    r = box.commands.run("python3 /tmp/hostile.py", timeout_seconds=120)
    assert r.exit_code == 0, r.stderr
    answers = r.stdout.splitlines()
    assert answers[0] == "closed" and answers[4] in ("closed", "HTTP/1.1 431 "), answers  # not HTTP; a 100 KB head
    assert "400" in answers[1] and "400" in answers[2], answers  # an absolute URL; two framings
    assert answers[3] in ("closed", "HTTP/1.1 403 "), answers  # a second Host
    assert len(internet.seen()) == count, "none of them reached the host"
    assert curl(box, "https://api.anthropic.com/still-fine", "x-api-key: $KEY").stdout == "200"
    # TRACE would echo the swapped header back in its body: refused
    traced = box.commands.run('curl -sS -o /dev/null -w "%{http_code}" -X TRACE -H "x-api-key: $KEY" '
                              "https://api.anthropic.com/echo")
    assert traced.stdout == "405" and not [q for q in internet.seen() if q["path"] == "/echo"]
