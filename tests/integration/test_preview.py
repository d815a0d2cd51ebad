"""Preview URLs end to end: a real box running a small web app (a page, an asset, a header echo,
server-sent events and a WebSocket echo, all on one port) and `python3 -m http.server`, reached
through the real preview proxy on loopback, and once through headless Chromium."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import websockets

from hutch import Sandbox, ValidationError
from tests.integration.support import HUTCH, Env, needs_installed, wait_for

APP = r'''
import base64, hashlib, json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send(self, body, kind="text/plain"):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/":
            self.send(b'<html><body><p id="x">waiting</p><script src="/asset.js"></script></body></html>', "text/html")
        elif self.path == "/asset.js":
            self.send(b'document.getElementById("x").textContent = "asset loaded on port " + location.port;',
                      "application/javascript")
        elif self.path.startswith("/headers"):
            self.send(json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode(),
                      "application/json")
        elif self.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for n in range(2):
                while n == 1 and not os.path.exists("/tmp/go-on"):
                    time.sleep(0.05)
                event = f"data: event {n}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif self.headers.get("Upgrade", "").lower() == "websocket":
            accept = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] +
                                      "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            while True:  # text frames from the client (masked, under 126 bytes), echoed back
                head = self.rfile.read(2)
                if len(head) < 2 or head[0] & 0x0F == 8:
                    return
                size, mask = head[1] & 0x7F, self.rfile.read(4)
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(size)))
                self.wfile.write(bytes([0x81, len(data) + 5]) + b"echo " + data)
                self.wfile.flush()
        else:
            self.send_error(404)

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), App).serve_forever()
'''


def serve(box: Any, port: int, command: str | None = None) -> None:
    """Start a server in the box on `port` and wait until it answers there."""
    box.files.write("/tmp/app.py", APP)
    box.commands.spawn(command or f"python3 /tmp/app.py {port}").close()
    probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1)\""
    wait_for(lambda: box.commands.run(probe).exit_code == 0, 30, f"port {port} in the box")


def get(env: Env, url: str, path: str = "/", **kwargs: Any) -> httpx.Response:
    """A request to a preview URL: to the proxy on loopback, with the URL's host in Host (this
    machine's resolver does not know *.localhost; browsers do)."""
    host = urlsplit(url).netloc
    return httpx.get(f"http://127.0.0.1:{env.server.preview_port}{path}", headers={"Host": host, **kwargs.pop(
        "headers", {})}, timeout=60, **kwargs)


@pytest.fixture
def app(sdk: Any) -> Iterator[Any]:
    sb = sdk.create(name="preview")
    try:
        serve(sb, 8000)
        yield sb
    finally:
        sb.kill()


def test_public_ports_answer_and_unpublished_ones_do_not(app: Any, env: Env) -> None:
    url = app.get_preview_url(8000)
    assert url == f"http://8000-{app.id}.localhost:{env.server.preview_port}"
    assert get(env, url).status_code == 404, "not published yet"
    published = app.publish_preview_port(8000)
    assert (published.port, published.access, published.url) == (8000, "public", url)
    page = get(env, url)
    assert page.status_code == 200 and b"asset.js" in page.content
    assert get(env, url, "/asset.js").status_code == 200
    assert [p.port for p in app.list_preview_ports()] == [8000]
    assert get(env, app.get_preview_url(8001)).status_code == 404
    assert get(env, url.replace(app.id, "00000000-0000-0000-0000-000000000000")).status_code == 404
    assert httpx.get(f"http://127.0.0.1:{env.server.preview_port}/", timeout=10).status_code == 404  # no preview host
    app.unpublish_preview_port(8000)
    assert get(env, url).status_code == 404 and app.list_preview_ports() == []


def test_a_private_port_wants_a_credential_for_that_port_only(app: Any, sdk: Any, env: Env) -> None:
    serve(app, 8001)
    url = app.publish_preview_port(8000, access="private").url
    other = app.publish_preview_port(8001, access="private").url
    assert get(env, url).status_code == 401

    token = app.get_preview_token(8000)
    echoed = get(env, url, "/headers", headers={"X-Hutch-Preview-Token": token, "Cookie": "mine=1"})
    assert echoed.status_code == 200
    seen = echoed.json()["headers"]
    assert "x-hutch-preview-token" not in seen and seen["cookie"] == "mine=1", "hutch's credential stays out of the box"
    assert get(env, other, headers={"X-Hutch-Preview-Token": token}).status_code == 401, "a token opens one port"

    link = app.get_signed_preview_url(8000, expires_in_seconds=60)
    path = link[len(url):]
    exchanged = get(env, url, path)
    assert exchanged.status_code == 303 and exchanged.headers["location"] == "/"
    cookie = exchanged.headers["set-cookie"]
    assert cookie.startswith("hutch-preview-8000=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    jar = {"Cookie": cookie.split(";")[0]}
    assert get(env, url, headers=jar).status_code == 200
    assert get(env, url, "/asset.js", headers=jar).status_code == 200, "the cookie covers assets"
    assert "hutch-preview" not in get(env, url, "/headers", headers=jar).json()["headers"].get("cookie", "")
    assert get(env, other, headers={"Cookie": cookie.split(";")[0].replace("8000", "8001")}).status_code == 401
    assert get(env, other, path).status_code == 403, "a link for one port opens no other"

    # another box, same port, same credentials: refused
    twin = sdk.create(name="twin")
    try:
        serve(twin, 8000)
        twin_url = twin.publish_preview_port(8000, access="private").url
        assert get(env, twin_url, headers={"X-Hutch-Preview-Token": token}).status_code == 401
        assert get(env, twin_url, headers=jar).status_code == 401
        assert get(env, twin_url, twin.get_signed_preview_url(8000)[len(twin_url):]).status_code == 303
    finally:
        twin.kill()

    # rotation voids the token, the cookie and the link at once
    app.rotate_preview_token(8000)
    assert get(env, url, headers={"X-Hutch-Preview-Token": token}).status_code == 401
    assert get(env, url, headers=jar).status_code == 401
    assert get(env, url, path).status_code == 403
    assert get(env, url, headers={"X-Hutch-Preview-Token": app.get_preview_token(8000)}).status_code == 200

    # unpublishing and publishing again brings no old credential back
    fresh = app.get_preview_token(8000)
    app.unpublish_preview_port(8000)
    app.publish_preview_port(8000, access="private")
    assert get(env, url, headers={"X-Hutch-Preview-Token": fresh}).status_code == 401


def test_links_redirect_only_within_the_port_and_cookies_serve_only_its_own_site(app: Any, env: Env) -> None:
    url = app.publish_preview_port(8000, access="private").url
    link = app.get_signed_preview_url(8000)
    query = link.split("?", 1)[1]
    for path in (f"//evil.example/?{query}", f"/\\evil.example/?{query}"):
        r = get(env, url, path)
        assert r.status_code == 303 and r.headers["location"] == "/evil.example/", r.headers.get("location")
    jar = {"Cookie": r.headers["set-cookie"].split(";")[0]}
    from_elsewhere = {**jar, "Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}
    assert get(env, url, "/headers", headers=from_elsewhere).status_code == 403, "another box's page cannot drive it"
    assert get(env, url, headers={**jar, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}).status_code == 200
    assert get(env, url, "/asset.js", headers={**jar, "Sec-Fetch-Site": "same-origin"}).status_code == 200


def test_signed_links_expire(app: Any, env: Env) -> None:
    url = app.publish_preview_port(8000, access="private").url
    link = app.get_signed_preview_url(8000, expires_in_seconds=1)
    time.sleep(2.1)  # on purpose: past the link's one second
    assert get(env, url, link[len(url):]).status_code == 403


def test_the_sandbox_default_access_applies_to_new_ports(sdk: Any, env: Env) -> None:
    sb = sdk.create(name="private-by-default", preview_access="private")
    try:
        assert sb.get_info().preview_access == "private"
        assert sb.publish_preview_port(9000).access == "private"
        assert sb.publish_preview_port(9001, access="public").access == "public"
    finally:
        sb.kill()


def test_bad_ports_are_refused_before_any_request(app: Any, env: Env) -> None:
    for port in (80, 1023, 3128, 65536, "8000", True):
        with pytest.raises(ValidationError):
            app.publish_preview_port(port)
        with pytest.raises(ValidationError):
            app.get_preview_url(port)
    r = httpx.post(f"{env.url}/v1/sandboxes/{app.id}/preview-ports", json={"port": 3128},
                   headers={"Authorization": f"Bearer {env.key_a}"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    assert app.list_preview_ports() == []
    unknown: Any = "secret"  # past the type checker, as a caller without one would send it
    with pytest.raises(ValidationError):
        Sandbox.create(name="x", preview_access=unknown)


def test_a_port_nothing_listens_on_is_a_bad_gateway(app: Any, env: Env) -> None:
    url = app.publish_preview_port(8009).url
    r = get(env, url)
    assert r.status_code == 502 and b"nothing listens on port 8009" in r.content


def test_streams_and_websockets_go_through(app: Any, env: Env) -> None:
    url = app.publish_preview_port(8000).url
    host = urlsplit(url).netloc
    with httpx.stream("GET", f"http://127.0.0.1:{env.server.preview_port}/sse", headers={"Host": host},
                      timeout=30) as r:
        lines = r.iter_lines()
        assert next(lines) == "data: event 0"  # arrives while the app waits to send the next
        assert app.commands.run("touch /tmp/go-on").exit_code == 0
        assert [line for line in lines if line] == ["data: event 1"]

    async def echo() -> list[str]:
        sock = socket.create_connection(("127.0.0.1", env.server.preview_port))
        async with websockets.connect(f"ws://{host}/ws", sock=sock) as ws:
            answers = []
            for text in ("hello", "again"):
                await ws.send(text)
                answers.append(str(await ws.recv()))
            return answers

    assert asyncio.run(echo()) == ["echo hello", "echo again"]


def test_a_request_wakes_a_paused_box(app: Any, env: Env) -> None:
    url = app.publish_preview_port(8000).url
    app.pause()
    assert app.get_info().status == "paused"
    assert get(env, url).status_code == 200, "the proxy resumed it and the server in it answered"
    assert app.get_info().status == "active"


def test_http_server_in_a_box_and_the_cli(app: Any, env: Env) -> None:
    app.files.write("/tmp/site/hello.txt", "hi from the box\n")
    serve(app, 8080, "cd /tmp/site && python3 -m http.server 8080")
    environ = {"HUTCH_API_KEY": env.key_a, "HUTCH_BASE_URL": env.url, "PATH": "/usr/bin:/bin"}
    listed = subprocess.run([*HUTCH, "preview", app.id, "8080", "--publish"], capture_output=True, text=True,
                            env=environ, timeout=60)
    assert listed.returncode == 0 and listed.stdout.strip() == app.get_preview_url(8080), listed.stderr
    assert get(env, app.get_preview_url(8080), "/hello.txt").text == "hi from the box\n"
    signed = subprocess.run([*HUTCH, "preview", app.id, "8080", "--private"], capture_output=True, text=True,
                            env=environ, timeout=60)
    assert "hutch_preview=" in signed.stdout and app.list_preview_ports()[0].access == "private"
    table = subprocess.run([*HUTCH, "preview", app.id], capture_output=True, text=True, env=environ, timeout=60)
    assert app.get_preview_url(8080) in table.stdout and "private" in table.stdout


def test_a_browser_opens_a_signed_private_link(app: Any, env: Env) -> None:
    """What a person does: open the link. The page renders, and its script (an asset behind the
    same cookie) has run."""
    needs_installed("Debian's chromium", shutil.which("chromium") is not None)
    app.publish_preview_port(8000, access="private")
    link = app.get_signed_preview_url(8000, expires_in_seconds=120)
    profile = tempfile.mkdtemp(prefix="hutch-chromium-")
    try:
        out = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--virtual-time-budget=5000", "--dump-dom", link],
            capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert f"asset loaded on port {env.server.preview_port}" in out.stdout, out.stderr[-2000:]
    assert json.dumps("waiting") not in out.stdout
