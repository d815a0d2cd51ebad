"""The SDK's retry rules against a local server of our own that fails on purpose: GET and DELETE
retry transient failures, POST and PATCH never do; configuration comes from the environment."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hutch import AuthenticationError, NotFoundError, RateLimitError, ServerError


class Flaky:
    """Answers 503 to the first `failures` requests, then the scripted answer."""

    def __init__(self, failures: int, status: int = 200, body: Any = None) -> None:
        self.failures, self.status, self.body = failures, status, body if body is not None else []
        self.seen: list[tuple[str, str]] = []


@pytest.fixture
def flaky() -> Iterator[tuple[Flaky, str]]:
    script = Flaky(0)

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            script.seen.append((self.command, self.path))
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if len(script.seen) <= script.failures:
                status, body = 503, {"error": {"code": "unavailable", "message": "try later"}}
            else:
                status, body = script.status, script.body
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_PATCH = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield script, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_get_retries_transient_failures(sdk: Any, flaky: tuple[Flaky, str]) -> None:
    script, url = flaky
    script.failures = 2
    assert sdk.list(api_key="k", base_url=url) == []
    assert [m for m, _ in script.seen] == ["GET", "GET", "GET"]


def test_get_gives_up_after_its_retries(sdk: Any, flaky: tuple[Flaky, str]) -> None:
    script, url = flaky
    script.failures = 100
    with pytest.raises(ServerError) as err:
        sdk.list(api_key="k", base_url=url)
    assert err.value.status_code == 503 and err.value.code == "unavailable" and len(script.seen) == 4


def test_delete_retries_and_a_404_is_quiet(sdk: Any, flaky: tuple[Flaky, str]) -> None:
    script, url = flaky
    script.failures, script.status, script.body = 1, 404, {"error": {"code": "not_found", "message": "gone"}}
    sdk.kill_by_id("x", api_key="k", base_url=url)
    assert [m for m, _ in script.seen] == ["DELETE", "DELETE"]


def test_post_is_never_retried(sdk: Any, flaky: tuple[Flaky, str]) -> None:
    script, url = flaky
    script.failures = 1
    with pytest.raises(ServerError):
        sdk.create(name="x", api_key="k", base_url=url)
    assert [m for m, _ in script.seen] == ["POST"]


def test_status_codes_map_to_typed_errors(sdk: Any, flaky: tuple[Flaky, str]) -> None:
    script, url = flaky
    for status, cls, code in ((401, AuthenticationError, "invalid_api_key"), (404, NotFoundError, "not_found"),
                              (429, RateLimitError, "too_many_sandboxes")):
        script.seen.clear()
        script.status, script.body = status, {"error": {"code": code, "message": "m"}}
        with pytest.raises(cls) as err:
            sdk.connect("x", api_key="k", base_url=url)
        assert err.value.code == code and err.value.status_code == status


def test_configuration_comes_from_the_environment(sdk: Any, flaky: tuple[Flaky, str], monkeypatch: pytest.MonkeyPatch) -> None:
    script, url = flaky
    monkeypatch.setenv("HUTCH_BASE_URL", url)
    monkeypatch.setenv("HUTCH_API_KEY", "from-env")
    assert sdk.list() == [] and script.seen == [("GET", "/v1/sandboxes")]
    monkeypatch.delenv("HUTCH_API_KEY")
    with pytest.raises(AuthenticationError) as err:
        sdk.list()
    assert err.value.code == "missing_api_key"


def test_an_unreachable_server_is_a_typed_error(sdk: Any) -> None:
    with pytest.raises(ServerError) as err:
        sdk.create(name="x", api_key="k", base_url="http://127.0.0.1:9")
    assert err.value.code == "connection_error"
