"""Attempts on preview URLs of a real server, as a web page and a client would make them: a
sibling origin framing a private port with its cookie, a box planting or reading hutch's cookie,
forwarded headers from the client, and one box's connections crowding out the others."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from hutch import Sandbox
from hutch.preview.proxy import MAX_PER_BOX
from tests.integration.support import Env, wait_for

# A web server for the box: a header echo (one "name: value" a line), an answer that sets
# cookies with hutch's names and its own, and kept-alive HTTP/1.1 connections.
APP = r'''
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = "".join(f"{k.lower()}: {v}\n" for k, v in self.headers.items()).encode()
        self.send_response(200)
        if self.path == "/cookies":
            for c in ("hutch-preview-8000=planted; Path=/", "__Host-hutch-preview-8000=planted; Secure; Path=/",
                      "hutch_preview_8000=planted; Path=/", "=hutch-preview-8000=planted", "mine=1; Path=/"):
                self.send_header("Set-Cookie", c)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), App).serve_forever()
'''

FRAMED_BY_SIBLING = {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}


def serve(box: Sandbox, port: int = 8000) -> None:
    box.files.write("/tmp/app.py", APP)
    box.commands.spawn(f"python3 /tmp/app.py {port}").close()
    probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=1)\""
    wait_for(lambda: box.commands.run(probe).exit_code == 0, 30, f"port {port} in the box")


def get(env: Env, url: str, path: str = "/", headers: dict[str, str] | None = None) -> httpx.Response:
    """To the proxy on loopback, the preview URL's host in Host."""
    return httpx.get(f"http://127.0.0.1:{env.server.preview_port}{path}",
                     headers={"Host": urlsplit(url).netloc, **(headers or {})}, timeout=60)


def seen(reply: httpx.Response) -> list[tuple[str, str]]:
    """The request's headers as the box's server saw them."""
    return [(k, v) for k, _, v in (line.partition(": ") for line in reply.text.splitlines())]


def cookie_for(env: Env, box: Sandbox, url: str, port: int = 8000) -> str:
    """`name=value` of the cookie a signed link is exchanged for."""
    reply = get(env, url, box.get_signed_preview_url(port)[len(url):])
    assert reply.status_code == 303
    return reply.headers["set-cookie"].split(";")[0]


@pytest.fixture
def site() -> Iterator[Sandbox]:
    box = Sandbox.create(name="preview-abuse")
    try:
        serve(box)
        yield box
    finally:
        box.kill()


def test_a_sibling_origin_cannot_frame_a_private_port(site: Sandbox, env: Env) -> None:
    url = site.publish_preview_port(8000, access="private").url
    cookie = {"Cookie": cookie_for(env, site, url)}
    assert get(env, url, headers={**cookie, **FRAMED_BY_SIBLING}).status_code == 403
    own = get(env, url, headers={**cookie, **FRAMED_BY_SIBLING, "Sec-Fetch-Site": "same-origin"})
    assert own.status_code == 200
    assert own.headers.get_list("x-frame-options") == ["SAMEORIGIN"]
    assert own.headers.get_list("content-security-policy") == ["frame-ancestors 'self'"]
    followed = get(env, url, headers={**cookie, **FRAMED_BY_SIBLING, "Sec-Fetch-Dest": "document"})
    assert followed.status_code == 200, "a link followed from a sibling still opens the page"
    site.publish_preview_port(8000, access="public")
    public = get(env, url, headers=FRAMED_BY_SIBLING)
    assert public.status_code == 200 and "x-frame-options" not in public.headers, "public ports stay embeddable"


def test_the_box_cannot_plant_or_read_hutchs_cookie(site: Sandbox, env: Env) -> None:
    url = site.publish_preview_port(8000, access="private").url
    cookie = cookie_for(env, site, url)
    name, _, value = cookie.partition("=")
    answer = get(env, url, "/cookies", headers={"Cookie": cookie})
    assert answer.status_code == 200 and answer.headers.get_list("set-cookie") == ["mine=1; Path=/"]
    assert get(env, url, headers={"Cookie": f"hutch_preview_8000={value}"}).status_code == 401, "the old name"
    assert get(env, url, headers={"Cookie": "hutch-preview-8000=planted"}).status_code == 401
    echoed = seen(get(env, url, "/headers", headers={"Cookie": f"{cookie}; hutch_preview_8000={value}; mine=1"}))
    assert [v for k, v in echoed if k == "cookie"] == ["mine=1"]
    assert value not in str(echoed) and name not in str(echoed)


def test_forwarded_headers_from_the_client_are_replaced(site: Sandbox, env: Env) -> None:
    url = site.publish_preview_port(8000).url
    lies = {"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9",
            "Forwarded": "for=203.0.113.9;host=evil.example", "X-Real-IP": "203.0.113.9"}
    echoed = seen(get(env, url, "/headers", headers=lies))
    host = urlsplit(url).netloc
    forwarded = [(k, v) for k, v in echoed if k in ("x-forwarded-host", "x-forwarded-proto", "x-forwarded-for",
                                                     "forwarded", "x-real-ip")]
    assert sorted(forwarded) == sorted([("x-forwarded-host", host), ("x-forwarded-proto", "http"),
                                        ("x-forwarded-for", "127.0.0.1"), ("x-real-ip", "127.0.0.1"),
                                        ("forwarded", f'for="127.0.0.1";host="{host}";proto=http')])
    assert "evil.example" not in str(echoed) and "203.0.113.9" not in str(echoed)


def test_one_box_past_its_connection_cap_leaves_other_previews_answering(site: Sandbox, env: Env) -> None:
    other = Sandbox.create(name="bystander")
    url = site.publish_preview_port(8000).url
    other_url = other.publish_preview_port(8000).url
    request = f"GET / HTTP/1.1\r\nHost: {urlsplit(url).netloc}\r\n\r\n".encode()
    held: list[socket.socket] = []
    try:
        serve(other)
        for _ in range(MAX_PER_BOX):  # each kept alive, its tunnel open, after one answer
            conn = socket.create_connection(("127.0.0.1", env.server.preview_port), timeout=60)
            held.append(conn)
            conn.sendall(request)
            assert conn.recv(65536).startswith(b"HTTP/1.1 200")
        refused = get(env, url)
        assert refused.status_code == 503 and b"connections" in refused.content
        assert get(env, other_url).status_code == 200, "another box's preview still answers"
        held.pop().close()
        wait_for(lambda: get(env, url).status_code == 200, 10, "a slot back when a connection ends")
    finally:
        for conn in held:
            conn.close()
        other.kill()
