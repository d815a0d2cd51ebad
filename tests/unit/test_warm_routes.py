"""The server builds its routes at its start: FastAPI builds a router's (each route's dependencies,
read from signatures) at the first request that reaches it, ~0.5-1 s of CPU that the first call
after a start, and every call queued behind it, would wait for."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import httpx
import pytest

from hutch.server.app import create_app, warm_routes
from hutch.services.config import ServerConfig

FIRST_CALLS = [("POST", "/v1/sandboxes"), ("POST", "/data/v1/sandboxes/x/commands/run"), ("POST", "/e2b/sandboxes"),
               ("GET", "/console/nope")]


def signatures_read_by_first_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: bool) -> int:
    app = create_app(ServerConfig(data_dir=tmp_path))
    read = 0
    real = inspect.signature

    def counted(*args: Any, **kwargs: Any) -> inspect.Signature:
        nonlocal read
        read += 1
        return real(*args, **kwargs)

    async def main() -> None:
        if warm:
            await warm_routes(app)
        monkeypatch.setattr(inspect, "signature", counted)
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)  # no lifespan: the calls fail after routing
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for method, path in FIRST_CALLS:
                await client.request(method, path, json={})

    asyncio.run(main())
    return read


def test_after_the_warm_up_a_first_call_builds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert signatures_read_by_first_calls(tmp_path / "cold", monkeypatch, warm=False) > 0, "FastAPI builds lazily"
    monkeypatch.undo()
    assert signatures_read_by_first_calls(tmp_path / "warm", monkeypatch, warm=True) == 0
